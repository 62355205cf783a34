"""Eight schools: the auxiliary decomposition leaves the prior unchanged; NUTS agrees with
quadrature; the sample-based KL estimator is exact where it can be checked; the binary's outputs."""
import dataclasses
import math
import os
import subprocess
import sys

import edward2 as ed
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from toy.divergence import knn_kl_divergence
from toy import eight_schools, eight_schools_model

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sample(program, names, num_draws, *args):
  """Draws of the named random variables of an Edward2 program.

  One compiled program run per draw.
  """
  @tf.function
  def draw():
    with ed.tape() as tape:
      program(*args)
    return {name: tape[name].value for name in names}
  values = [draw() for _ in range(num_draws)]
  return {name: np.stack([v[name].numpy() for v in values]) for name in names}


@pytest.mark.parametrize("num_auxiliary,num_fixed", [(4, 3), (3, 1)])
def test_the_auxiliary_decomposition_leaves_the_prior_unchanged(num_auxiliary, num_fixed):
  tf.random.set_seed(1)
  original = _sample(eight_schools_model.eight_schools, ["mu", "tau", "theta"], 1500)
  noncentered = _sample(eight_schools_model.noncentered_eight_schools, ["mu", "tau", "eta"], 1500)
  auxiliary = _sample(eight_schools_model.auxiliary_eight_schools,
                      ["a_mu", "r_mu", "a_tau", "r_tau", "a_theta", "r_theta"], 1500, num_auxiliary,
                      num_fixed)
  mu, tau, theta = (t.numpy() for t in eight_schools_model.to_parameters(
      tf.constant(auxiliary["a_mu"].sum(1) + auxiliary["r_mu"]),
      tf.constant(auxiliary["a_tau"].sum(1) + auxiliary["r_tau"]),
      tf.constant(auxiliary["a_theta"].sum(1) + auxiliary["r_theta"])))
  theta_noncentered = noncentered["mu"] + noncentered["tau"] * noncentered["eta"][:, 0]
  for ours, theirs in ((mu, original["mu"]), (tau, original["tau"]),
                       (theta[:, 0], original["theta"][:,
                                                       0]), (noncentered["tau"], original["tau"]),
                       (theta_noncentered, original["theta"][:, 0])):
    assert stats.ks_2samp(ours, theirs).pvalue > 0.01


def test_nuts_matches_quadrature_on_the_posterior_means():
  """The binary's reference sampler against quadrature. XLA-compiled: the same sampler, 2.5 times
  as fast (the binary's own uncompiled call runs in test_binary_writes_results_and_figures_...)."""
  quadrature = eight_schools_model.posterior_means_by_quadrature()
  assert abs(quadrature["mu_mean"] - 4.4) < 0.1 and abs(quadrature["tau_mean"] - 3.6) < 0.1
  draws = eight_schools_model.run_nuts(num_chains=64, num_burnin=300, num_draws=500, seed=3,
                                       jit_compile=True)
  assert float(draws["max_r_hat"]) < 1.02 and int(draws["divergences"]) < 5
  assert abs(np.mean(draws["mu"]) - quadrature["mu_mean"]) < 0.1
  assert abs(np.mean(draws["tau"]) - quadrature["tau_mean"]) < 0.1


def test_knn_kl_estimator_against_the_gaussian_closed_form():
  rng = np.random.default_rng(0)
  p = rng.normal(0.0, 1.0, size=[20000, 3])
  q = rng.normal(0.5, 2.0, size=[40000, 3])
  exact = 3 * (math.log(2.0) + (1 + 0.25) /
               (2 * 4) - 0.5)  # 1.048; the estimate's spread over seeds is ~0.03
  assert abs(knn_kl_divergence(p, q) - exact) < 0.1
  assert abs(knn_kl_divergence(p, rng.normal(size=[40000, 3]))) < 0.05


def test_binary_writes_results_and_figures_and_caches_nuts(tmp_path):
  config = eight_schools.EightSchoolsConfig(num_auxiliary=(1, 2), num_samples=40, initial_steps=40,
                                            steps_per_auxiliary=20, elbo_num_samples=16,
                                            nuts_chains=4, nuts_burnin=40, nuts_draws=60, knn_k=3)
  metrics = eight_schools.train_and_evaluate(config, str(tmp_path))
  assert set(metrics["elbo_aux_by_k"]) == set(metrics["kl_by_k"]) == {"1", "2"}
  assert all(np.isfinite(v) for v in metrics["elbo_aux_by_k"].values())
  assert set(metrics["kl_all_parameters_by_k"]) == {"1", "2"}
  assert np.isfinite(metrics["kl_exact_draws_mean"]) and metrics["kl_exact_draws_std"] > 0
  assert metrics["kl_auxiliary_by_k"]["1"] == pytest.approx(
      metrics["log_evidence_quadrature"] - metrics["elbo_aux_by_k"]["1"])
  with np.load(tmp_path / "samples.npz") as samples:
    assert samples["theta_k2"].shape == (40, 8) and np.all(samples["tau_k2"] >= 0)
  for name in ("results.json", "figure_samples.png", "figure_kl.png", "nuts.npz", "samples.npz"):
    assert (tmp_path / name).stat().st_size > 0
  cached_at = (tmp_path / "nuts.npz").stat().st_mtime_ns
  eight_schools.train_and_evaluate(dataclasses.replace(config, num_auxiliary=(1,)), str(tmp_path))
  assert (tmp_path / "nuts.npz").stat().st_mtime_ns == cached_at


@pytest.mark.parametrize("field,value", [("num_auxiliary", (1, 0)), ("num_samples", 0),
                                         ("knn_k", 0)])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, field, value):
  config = dataclasses.replace(eight_schools.EightSchoolsConfig(), **{field: value})
  with pytest.raises(ValueError, match=field):
    eight_schools.train_and_evaluate(config, str(tmp_path))
  assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--num_auxiliary=1,0", "--num_auxiliary=1,x", "--num_samples=0"])
def test_binary_rejects_bad_flags_with_one_line_and_exit_2(tmp_path, flag):
  """Checked before TensorFlow loads: without TF_CPP_MIN_LOG_LEVEL (as a user's shell runs it)
  the error is stderr's only line, no start-up noise before it."""
  output_dir = tmp_path / "out"
  environment = {name: value for name, value in os.environ.items()
                 if name != "TF_CPP_MIN_LOG_LEVEL"}
  completed = subprocess.run(
      [sys.executable, "-m", "toy.eight_schools", f"--output_dir={output_dir}", flag],
      cwd=REPOSITORY, capture_output=True, text=True, timeout=300, env=environment)
  assert completed.returncode == 2
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: num_"), lines
  assert not output_dir.exists()
