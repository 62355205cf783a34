import json
import math
import os
import subprocess

import numpy as np
import pytest

from auxiliary_sampling import predictive
from common.results import write_results
from common.seeding import seed_everything
from report import appendix, results_loader, tables
from report import main as report


def test_results_file_has_the_conventions(tmp_path):
  path = write_results(str(tmp_path), benchmark="uci", dataset="wine", method="vi", seed=3,
                       flags={"steps": 10}, metrics={"test_mll": -0.9},
                       timings={"train_seconds": 1.0})
  payload = json.loads(open(path).read())
  assert set(payload) >= {
      "benchmark", "dataset", "method", "seed", "flags", "metrics", "timings", "versions",
      "git_commit", "machine", "command"
  }
  assert payload["metrics"]["test_mll"] == -0.9


def test_results_record_the_commit_the_run_started_from_and_the_one_it_ended_at(
    tmp_path, monkeypatch):
  from common import results
  started_at = results.git_commit()
  monkeypatch.setattr(results, "git_commit", lambda: "commit-landed-during-the-run")
  payload = json.loads(
      open(
          write_results(str(tmp_path), benchmark="uci", method="vi", flags={}, metrics={},
                        timings={})).read())
  assert payload["git_commit"] == "commit-landed-during-the-run"
  assert payload["git_commit_at_start"] == started_at


def test_results_files_get_the_usual_permissions_not_the_temporary_files(tmp_path):
  previous = os.umask(0o022)
  try:
    path = write_results(str(tmp_path), benchmark="uci", method="vi", flags={}, metrics={},
                         timings={})
  finally:
    os.umask(previous)
  assert os.stat(path).st_mode & 0o777 == 0o644


def test_non_finite_metrics_are_refused_and_nothing_is_written(tmp_path):
  with pytest.raises(FloatingPointError, match="metrics.elbo is nan"):
    write_results(str(tmp_path), benchmark="uci", method="vi", flags={}, metrics={"elbo": math.nan},
                  timings={})
  assert os.listdir(tmp_path) == []


def test_seed_everything_rejects_bad_seeds():
  with pytest.raises(ValueError, match="seed=-1"):
    seed_everything(-1)


def test_seeding_builds_the_same_weights_after_a_keras_set_random_seed_elsewhere():
  """Catches seeding that leaves Keras' own seed generator in place: after any
  `tf.keras.utils.set_random_seed` in the process (test_baselines calls it), initialisers drew
  their seeds from it, so a model seeded with seed_everything(0) got other weights than in a fresh
  process, and tests comparing two freshly seeded models failed depending on test order."""
  import tensorflow as tf
  import tf_keras

  def weights_after_seeding():
    seed_everything(0)
    layer = tf_keras.layers.Dense(4)
    layer(tf.zeros([1, 3]))
    return layer.kernel.numpy()

  fresh = weights_after_seeding()
  tf_keras.utils.set_random_seed(5)
  tf_keras.layers.Dense(2)(tf.zeros([1, 3]))
  np.testing.assert_array_equal(weights_after_seeding(), fresh)


def test_log_mean_exp_and_predictive_likelihoods():
  values = np.log(np.array([[0.2, 0.5], [0.4, 0.1]]))
  assert predictive.log_mean_exp(values, axis=0).numpy() == pytest.approx(np.log([0.3, 0.3]))
  assert predictive.log_mean_exp(np.array([-1000.0, -1000.0])).numpy() == pytest.approx(-1000.0)
  from scipy.stats import norm
  # Original units: y = 10 + 2 * y_std.
  got = predictive.gaussian_log_likelihood(np.array([13.0]), np.array([1.0]), np.array([0.5]), 10.0,
                                           2.0)
  assert got.numpy() == pytest.approx(norm(12.0, 1.0).logpdf(13.0))
  logits = np.array([[[2.0, 0.0, -1.0]], [[0.0, 1.0, 0.0]]])
  member = predictive.categorical_log_likelihood(np.array([1]), logits).numpy()
  probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  assert member[:, 0] == pytest.approx(np.log(probabilities[:, 0, 1]))
  assert predictive.marginal_log_likelihood(member) == pytest.approx(
      np.log(probabilities[:, 0, 1].mean()))


def test_report_appendix_places_the_paper_beside_every_metric(tmp_path):
  for seed, mll in enumerate([-2.9, -2.7]):
    write_results(str(tmp_path / "uci" / "boston_housing" / "vi" / str(seed)), benchmark="uci",
                  dataset="boston_housing", method="vi", seed=seed, flags={},
                  metrics={"test_mll": mll, "elbo": -650.0 - seed, "target_std": 1.0,
                           "num_train": 404}, timings={"train_seconds": 1.0})
  write_results(str(tmp_path / "ablations" / "fixed_prior" / "uci" / "boston_housing" / "vi" / "0"),
                benchmark="uci", dataset="boston_housing", method="vi", seed=0, flags={},
                metrics={"test_mll": -5.0}, timings={})
  write_results(str(tmp_path / "smoke" / "uci" / "vi"), benchmark="uci", dataset="boston_housing",
                method="vi", seed=0, flags={}, metrics={"test_mll": -9.0}, timings={})
  frame = appendix.load_results(str(tmp_path))
  assert len(frame) == 2   # ablation runs have their own tables; smoke runs are not results
  table = appendix.summarise(frame, ["test_mll", "elbo"])
  row = table[(table.dataset == "boston_housing") & (table.method == "vi")].iloc[0]
  assert row["test_mll_mean"] == pytest.approx(-2.8)
  assert row["test_mll_std"] == pytest.approx(np.std([-2.9, -2.7], ddof=1))
  assert row["runs"] == 2
  paper = results_loader.load_paper_table("table1_uci.csv")
  joined = appendix.beside_paper(table, paper, {"test_mll": "mll", "elbo": "elbo"})
  joined_row = joined[(joined.dataset == "boston_housing") & (joined.method == "vi")].iloc[0]
  assert joined_row["paper_mll_mean"] == pytest.approx(-2.874)
  report.write_report(str(tmp_path), str(tmp_path / "report"))
  text = (tmp_path / "report" / "appendix.md").read_text()
  assert "boston_housing" in text and "-2.874" in text and "smoke" not in text
  assert os.path.exists(tmp_path / "report" / "uci.csv")


def test_appendix_averages_the_seeds_of_one_experiment_never_two_experiments(tmp_path):
  """Runs of one benchmark, dataset and method made with other settings sit in other folders
  (ResNet-20's batch-norm variants; the bandit with a learned or a fixed noise scale, whose
  per-seed runs name their seed only in flags.seeds). Catches the appendix averaging them as if
  they were seeds (it grouped by benchmark, dataset and method: the bandit's vi_ts row was the
  mean of a learned-noise and a fixed-noise run)."""
  for variant, mlls in (("hybrid_bn", [-0.30, -0.34]), ("full_bn", [-0.50])):
    for seed, mll in enumerate(mlls):
      write_results(str(tmp_path / "resnet" / "fashion_mnist" / variant / "vi" / f"seed_{seed}"),
                    benchmark="resnet", dataset="fashion_mnist", method="vi", seed=seed, flags={},
                    metrics={"test_mll": mll}, timings={})
  for folder, seeds, regret in (("mushroom", [0], 100.0), ("mushroom", [1], 300.0),
                                ("mushroom_noise_0.5", [0, 1], 900.0)):
    write_results(str(tmp_path / "bandits" / folder / "vi_ts" /
                      (f"seed_{seeds[0]}" if len(seeds) == 1 else "")),
                  benchmark="bandits", dataset="mushroom", method="vi_ts", seed=None,
                  flags={"seeds": seeds}, metrics={"cumulative_regret": regret}, timings={})
  _, tables = appendix.appendix(str(tmp_path), str(tmp_path / "report"))
  resnet = tables["resnet"].set_index("experiment")
  assert resnet.loc["resnet/fashion_mnist/hybrid_bn/vi", "test_mll_mean"] == pytest.approx(-0.32)
  assert resnet.loc["resnet/fashion_mnist/hybrid_bn/vi", "runs"] == 2
  assert resnet.loc["resnet/fashion_mnist/full_bn/vi", "test_mll_mean"] == pytest.approx(-0.50)
  bandits = tables["bandits"].set_index("experiment")
  assert bandits.loc["bandits/mushroom/vi_ts", "cumulative_regret_mean"] == pytest.approx(200.0)
  assert bandits.loc["bandits/mushroom/vi_ts", "runs"] == 2
  assert bandits.loc["bandits/mushroom_noise_0.5/vi_ts", "cumulative_regret_mean"] == 900.0
  assert len(bandits) == 2 and len(resnet) == 2


def test_one_loader_skips_ablations_related_and_smoke_below_the_results_dir(tmp_path):
  """Tables and report count neither ablations, related methods (results/related: VOGN runs are
  benchmark "uci" too, and would enter Table 1's machine time) nor smoke runs."""
  def write(*parts, benchmark="uci"):
    write_results(str(tmp_path.joinpath(*parts)), benchmark=benchmark, dataset="wine", method="vi",
                  seed=0, flags={}, metrics={"test_mll": -1.0}, timings={"train_seconds": 1.0})
  write("uci", "wine", "vi")
  write("benchmarks", "refine_speed", benchmark="benchmarks")
  write("ablations", "no_empirical_bayes", "uci", "wine", "vi")
  write("smoke", "uci", "vi")
  write("related", "uci", "wine", "vogn")
  write("uci", "smoke", "vi")   # excluded at any depth below results_dir
  counted = [os.path.relpath(run.path, tmp_path) for run in results_loader.load_runs(str(tmp_path))]
  assert counted == [os.path.join("benchmarks", "refine_speed", "results.json"),
                     os.path.join("uci", "wine", "vi", "results.json")]
  only_uci = results_loader.load_runs(str(tmp_path), "uci")
  assert [run.payload["benchmark"] for run in only_uci] == ["uci"]
  assert list(appendix.load_results(str(tmp_path))["path"]) == counted
  assert list(tables.load_runs(str(tmp_path), "uci")["path"]) == [str(tmp_path / counted[1])]
  # Pointing results_dir at an ablation reads it: the rule looks only below results_dir.
  ablation = tmp_path / "ablations" / "no_empirical_bayes" / "uci"
  assert len(tables.load_runs(str(ablation), "uci")) == 1


def test_appendix_gives_each_toy_experiment_its_own_section_with_per_k_metrics(tmp_path):
  write_results(str(tmp_path / "toy" / "eight_schools"), benchmark="toy", dataset="eight_schools",
                method="refined_vi", seed=0, flags={}, metrics={
                    "elbo_aux_by_k": {
                        "1": -31.47,
                        "4": -31.45
                    },
                    "nuts_mu_mean": 4.4
                }, timings={})
  write_results(str(tmp_path / "toy" / "multimodal"), benchmark="toy", dataset="multimodal",
                method="refined_vi", seed=0, flags={}, metrics={"elbo_aux": -0.5}, timings={})
  frame = appendix.load_results(str(tmp_path))
  row = frame[frame.dataset == "eight_schools"].iloc[0]
  assert row["elbo_aux_by_k[4]"] == pytest.approx(-31.45) and row["nuts_mu_mean"] == pytest.approx(
      4.4)
  report.write_report(str(tmp_path), str(tmp_path / "report"))
  text = (tmp_path / "report" / "appendix.md").read_text()
  eight_schools = text.split("## toy: eight_schools")[1].split("## toy: multimodal")[0]
  assert "| elbo_aux_by_k[4] | -31.450 |" in eight_schools and "elbo_aux_mean" not in eight_schools


def test_git_commit_is_dirty_for_changed_code_but_not_for_rewritten_results(tmp_path):
  from common.results import git_commit

  def git(*args):
    subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
  git("init", "-q")
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "results.json").write_text("{}")
  (tmp_path / "code.py").write_text("x = 1\n")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
  assert not git_commit(str(tmp_path)).endswith("-dirty")
  (tmp_path / "results" / "results.json").write_text('{"rerun": true}')
  assert not git_commit(str(tmp_path)).endswith("-dirty")
  (tmp_path / "code.py").write_text("x = 2\n")
  assert git_commit(str(tmp_path)).endswith("-dirty")


def test_cpu_description_names_the_model_and_the_kernel_features_of_each_architecture(
    tmp_path, monkeypatch):
  """Catches a machine record that cannot tell two CPUs apart: SVGD runs made on the 25th did not
  reproduce on the 27th at the same commit, data and versions, and nothing recorded said why."""
  from common.results import cpu_description, machine_description
  x86 = tmp_path / "x86"
  x86.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
                 "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile\n\n"
                 "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
                 "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile\n")
  arm = tmp_path / "arm"
  arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve crc32\n"
                 "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd40\n")
  monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
  monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
  monkeypatch.delenv("ONEDNN_DEFAULT_FPMATH_MODE", raising=False)
  assert cpu_description(str(x86)) == {
      "cpu_model": "Intel(R) Xeon(R) Platinum 8481C",
      "cpu_features": ["avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"],
      "onednn_environment": {"TF_ENABLE_ONEDNN_OPTS": "0"}}
  arm_description = cpu_description(str(arm))
  assert arm_description["cpu_model"] == "implementer 0x41 part 0xd40"
  assert arm_description["cpu_features"] == ["asimd", "sve"]
  assert cpu_description(str(tmp_path / "missing"))["cpu_model"] is None
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
  machine = machine_description()
  assert machine["onednn_environment"] == {}
  assert set(machine) >= {"cpu_model", "cpu_features", "onednn_environment"}


@pytest.mark.parametrize("created, leave_a_file", [(True, False), (True, True), (False, False)])
def test_a_failed_run_removes_only_the_empty_folders_it_created(tmp_path, created, leave_a_file):
  """A run that created its output folder and failed before writing a file leaves no folder; a
  folder that existed before, or one holding a file (a checkpoint of hours of training), stays,
  and the run's own error is what propagates. Catches a removal of a pre-existing folder or of
  files (`shutil.rmtree`)."""
  from runner.output_directory import removed_if_failed_empty
  output = tmp_path / "run"
  (output / "checkpoints" / "vi").mkdir(parents=True)
  if leave_a_file:
    (output / "checkpoints" / "vi" / "ckpt-1.index").write_text("state")
  with pytest.raises(KeyError, match="refused"):
    with removed_if_failed_empty(str(output), created):
      raise KeyError("refused")
  assert output.exists() == (not created or leave_a_file)
  if leave_a_file:
    assert (output / "checkpoints" / "vi" / "ckpt-1.index").read_text() == "state"
