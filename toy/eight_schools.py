"""Eight schools (paper Sections 2.4-2.5, Figure 3).

Refinement with non-Gaussian auxiliaries against NUTS.

  python -m toy.eight_schools --output_dir=results/toy/eight_schools

The model, as an Edward2 program: mu ~ N(0, 5^2), tau ~ HalfCauchy(0, 5),
theta_i ~ N(mu, tau^2), y_i ~ N(theta_i, sigma_i^2). The paper's auxiliary
decomposition, also an Edward2 program: mu = sum_k a_mu_k, a_mu_k ~ N(0, 25/K);
tau = |sum_k a_tau_k|, a_tau_k ~ Cauchy(0, 5/K); theta = mu + tau sum_k a_theta_k,
a_theta_k ~ N(0, 1/K). Both log joints come from `ed.make_log_joint_fn`. The programs, NUTS and
the quadrature references are in `toy.eight_schools_model`, which loads TensorFlow: the binary
imports it after its flags have been checked.

For each K (flag), `auxiliary_sampling.non_gaussian_refinement.refine_non_gaussian` draws M
refined samples (K = 1: mean-field VI, i.e. ADVI in this parameterisation).
The reference is NUTS (`tfp.mcmc`) on (mu, log tau, theta standardised),
cached in the output directory. Writes figure_samples.png (theta_1 against
log tau per K beside NUTS, Figure 3 left), figure_kl.png (KL to NUTS against K,
Figure 3 right) and results.json with metrics.elbo_aux_by_k, metrics.kl_by_k,
metrics.nuts_mu_mean and metrics.nuts_tau_mean.

KL(refined || NUTS) (metrics.kl_by_k) is estimated in the (theta_1, log tau)
plane of Figure 3 left with the k-nearest-neighbour estimator
(toy.divergence): consistent and free of the bandwidth a kernel density
estimate (the paper's choice) needs. On all ten parameters
(metrics.kl_all_parameters_by_k) the estimator is biased at a few thousand
samples: it measured -0.6 to -1.0 at M = 500-2000, so it is reported, not used.
To show what the sample-based estimate can resolve, the binary computes the
same KL for 8 sets of M exact posterior draws (quadrature over (mu, log tau),
theta | mu, tau Gaussian): metrics.kl_exact_draws_mean / _std, the grey band of
figure_kl.png. At M = 1000 the committed run measured 0.010 ± 0.018 nats, the
size of the differences between K. So the binary also reports
metrics.kl_auxiliary_by_k = log p(y) - ELBO_aux, with log p(y) by quadrature:
the exact KL(q_ref(a_1..K) || p(a_1..K | y)), an upper bound on the refined
posterior's KL over all ten parameters, with a standard error of ~0.01. The
refined draws go to samples.npz.
"""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
from absl import logging

from runner import cli
from common.config import Config, UsageError, setting
from toy.divergence import knn_kl_divergence
from common.results import atomic_output, save_figure, write_results
from common.seeding import seed_everything

_NOISE_REPLICATES = 8   # sets of exact posterior draws that calibrate the sample-based KL


@dataclasses.dataclass
class EightSchoolsConfig(Config):
  """Refinement for several K against a NUTS reference."""

  num_auxiliary: tuple[int, ...] = setting((1, 2, 4, 8, 16), "Values of K, comma-separated.",
                                           minimum=1)
  num_samples: int = setting(
      1000, "Refined samples per K (the Cauchy block's grids make K = 16 the costly "
      "part).", minimum=1)
  initial_steps: int = setting(3000, "Adam steps of the initial mean-field fit.", minimum=0)
  steps_per_auxiliary: int = setting(500, "Adam steps after each auxiliary variable.", minimum=0)
  learning_rate: float = setting(1e-2, "Adam learning rate.", above=0)
  num_mc_samples: int = setting(16, "Monte Carlo draws per Adam step.", minimum=1)
  elbo_num_samples: int = setting(256, "Monte Carlo draws per ELBO_aux estimate.", minimum=1)
  nuts_chains: int = setting(64, "NUTS chains of the reference.", minimum=1)
  nuts_burnin: int = setting(1000, "NUTS burn-in steps per chain.", minimum=0)
  nuts_draws: int = setting(2000, "NUTS draws kept per chain.", minimum=1)
  knn_k: int = setting(5, "Neighbours of the k-nearest-neighbour KL estimator.", minimum=1)
  seed: int = setting(0, "Random seed.", minimum=0)

  def check(self) -> None:
    if self.knn_k >= self.num_samples:
      raise UsageError(f"knn_k={self.knn_k} must be below num_samples={self.num_samples}")


def nuts_reference(config: EightSchoolsConfig, output_dir: str) -> dict[str, np.ndarray]:
  """NUTS draws, cached in output_dir/nuts.npz (reused when the sampler settings match)."""
  from toy.eight_schools_model import run_nuts
  path = os.path.join(output_dir, "nuts.npz")
  settings = np.array([config.nuts_chains, config.nuts_burnin, config.nuts_draws, config.seed])
  if os.path.exists(path):
    with np.load(path) as cached:
      if np.array_equal(cached["settings"], settings):
        return {name: cached[name] for name in cached.files if name != "settings"}
  draws = run_nuts(config.nuts_chains, config.nuts_burnin, config.nuts_draws, config.seed)
  with atomic_output(path) as temporary:
    with open(temporary, "wb") as handle:
      np.savez(handle, settings=settings, **draws)
  return draws


def train_and_evaluate(config: EightSchoolsConfig, output_dir: str) -> dict:
  """Refines for every K, compares with NUTS; writes results.json and Figure 3 into `output_dir`."""
  config.validate()
  # TensorFlow loads here, after the flags have been checked.
  import tensorflow as tf
  from auxiliary_sampling.non_gaussian_refinement import refine_non_gaussian
  from toy.eight_schools_model import (BLOCKS, as_features, auxiliary_log_joint_fn,
                                       log_evidence_by_quadrature, posterior_draws_by_quadrature,
                                       posterior_means_by_quadrature, to_parameters)
  seed_everything(config.seed)
  started = time.perf_counter()
  nuts = nuts_reference(config, output_dir)
  nuts_seconds = time.perf_counter() - started
  reference = as_features(nuts["mu"], nuts["tau"], nuts["theta"])
  refined, elbo_aux, elbo_aux_std, kl, kl_full, initial_elbo, timings = {}, {}, {}, {}, {}, {}, {}
  for k in config.num_auxiliary:
    result = refine_non_gaussian(
        BLOCKS, auxiliary_log_joint_fn(k), num_auxiliary=k, num_samples=config.num_samples,
        initial_steps=config.initial_steps, steps_per_auxiliary=config.steps_per_auxiliary,
        learning_rate=config.learning_rate, num_mc_samples=config.num_mc_samples,
        elbo_num_samples=config.elbo_num_samples, seed=config.seed)
    mu, tau, theta = (
        t.numpy() for t in to_parameters(*(tf.constant(result.samples[b.name]) for b in BLOCKS)))
    refined[k] = (mu, tau, theta)
    elbo_aux[str(k)] = result.elbo_aux_estimate
    elbo_aux_std[str(k)] = float(np.std(result.elbo_aux) / np.sqrt(len(result.elbo_aux)))
    initial_elbo[str(k)] = result.initial_elbo_estimate
    kl[str(k)] = knn_kl_divergence(np.column_stack([theta[:, 0], np.log(tau)]),
                                   reference[:, [2, 1]], k=config.knn_k)
    kl_full[str(k)] = knn_kl_divergence(as_features(mu, tau, theta), reference, k=config.knn_k)
    timings[f"refine_seconds_k{k}"] = result.timings["refine_seconds"]
    logging.info("K = %d: ELBO_aux %.4f ± %.4f, KL in the plane %.4f, %.0f s", k, elbo_aux[str(k)],
                 elbo_aux_std[str(k)], kl[str(k)], result.timings["refine_seconds"])
  with atomic_output(os.path.join(output_dir, "samples.npz")) as temporary:
    with open(temporary, "wb") as handle:
      np.savez(handle, **{f"{name}_k{k}": value for k, draws in refined.items()
                          for name, value in zip(("mu", "tau", "theta"), draws)})
  quadrature = posterior_means_by_quadrature()
  log_evidence = log_evidence_by_quadrature()
  # The estimator's own spread at this M: the same KL for sets of M exact posterior draws
  # (quadrature).
  exact_kl = []
  for replicate in range(_NOISE_REPLICATES):
    exact = posterior_draws_by_quadrature(config.num_samples, seed=config.seed * 1000 + replicate)
    exact_kl.append(knn_kl_divergence(np.column_stack([exact["theta"][:, 0], np.log(exact["tau"])]),
                                      reference[:, [2, 1]], k=config.knn_k))
  # ELBO_aux = log p(y) - KL(q_ref(a_1..K) || p(a_1..K | y)): an exact KL in the auxiliaries'
  # space, which bounds the refined posterior's KL over (mu, tau, theta) from above
  # (Proposition 1's first inequality).
  kl_auxiliary = {k: log_evidence - value for k, value in elbo_aux.items()}
  _figures(refined, nuts, kl, exact_kl, kl_auxiliary, elbo_aux_std, output_dir)
  metrics = {
      "elbo_aux_by_k": elbo_aux,
      "elbo_aux_stderr_by_k": elbo_aux_std,
      "initial_elbo_by_k": initial_elbo,
      "kl_by_k": kl,
      "kl_auxiliary_by_k": kl_auxiliary,
      "log_evidence_quadrature": log_evidence,
      "kl_exact_draws_mean": float(np.mean(exact_kl)),
      "kl_exact_draws_std": float(np.std(exact_kl)),
      "kl_all_parameters_by_k": kl_full,
      "nuts_mu_mean": float(np.mean(nuts["mu"])),
      "nuts_tau_mean": float(np.mean(nuts["tau"])),
      "quadrature_mu_mean": quadrature["mu_mean"],
      "quadrature_tau_mean": quadrature["tau_mean"],
      "nuts_divergences": int(nuts["divergences"]),
      "nuts_max_r_hat": float(nuts["max_r_hat"]),
      "refined_tau_mean_by_k": {
          str(k): float(np.mean(v[1])) for k, v in refined.items()
      },
  }
  timings.update(nuts_seconds=nuts_seconds, total_seconds=time.perf_counter() - started)
  write_results(output_dir, benchmark="toy", dataset="eight_schools", method="refined_vi",
                seed=config.seed, flags=config.as_dict(), metrics=metrics, timings=timings)
  return metrics


def _figures(refined: dict, nuts: dict, kl: dict, exact_kl: list, kl_auxiliary: dict,
             elbo_aux_std: dict, output_dir: str) -> None:
  """Figure 3 left (theta_1 against log tau: NUTS, then every K) and right (KL against K: the
  sample-based estimate to NUTS with the band exact posterior draws give, and log p(y) - ELBO_aux
  with two standard errors)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  shown = list(refined)
  figure, axes = plt.subplots(1,
                              len(shown) + 1, figsize=(3.2 * (len(shown) + 1), 3.2), sharex=True,
                              sharey=True)
  panels = [("NUTS", nuts["theta"][:, 0], np.log(nuts["tau"]))]
  panels += [(f"K = {k}", refined[k][2][:, 0], np.log(refined[k][1])) for k in shown]
  for axis, (title, theta_1, log_tau) in zip(axes, panels):
    axis.scatter(theta_1[:3000], log_tau[:3000], s=2, alpha=0.3)
    axis.set_title(title)
    axis.set_xlabel(r"$\theta_1$")
  axes[0].set_ylabel(r"$\log \tau$")
  axes[0].set_ylim(-6, 4)
  axes[0].set_xlim(-20, 45)
  save_figure(figure, os.path.join(output_dir, "figure_samples.png"))
  plt.close(figure)
  figure, axes = plt.subplots(1, 2, figsize=(8, 3))
  ks = [int(k) for k in kl]
  axes[0].plot(ks, [kl[str(k)] for k in ks], "o-")
  low, high = np.mean(exact_kl) - np.std(exact_kl), np.mean(exact_kl) + np.std(exact_kl)
  axes[0].axhspan(low, high, color="grey", alpha=0.3, label="exact posterior draws, mean ± std")
  axes[0].legend(fontsize=7)
  axes[0].set_ylabel(r"KL(refined || NUTS) in ($\theta_1$, log $\tau$)")
  axes[1].errorbar(ks, [kl_auxiliary[str(k)] for k in ks],
                   yerr=[2 * elbo_aux_std[str(k)] for k in ks], fmt="o-")
  axes[1].set_ylabel(r"log p(y) - ELBO$_{aux}$ (all parameters)")
  for axis in axes:
    axis.set_xscale("log", base=2)
    axis.set_xlabel("number of auxiliary variables K")
  figure.tight_layout()
  save_figure(figure, os.path.join(output_dir, "figure_kl.png"))
  plt.close(figure)


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = EightSchoolsConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate, printed_metrics=("elbo_aux_by_k", "kl_by_k"))
