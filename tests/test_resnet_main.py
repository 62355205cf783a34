"""The ResNet-20 binary end to end at tiny scale: every method, epochs, resume, bad input."""
import os
import subprocess
import sys

import numpy as np
import pytest

from auxiliary_sampling import member_convolution
from methods.trainers import training
from resnet import main as resnet_main
from resnet.config import METHODS, PAPER_DECAY_FACTORS, ResNetConfig
from tests.method_runs import MethodRuns
from tests.usage_runs import UsageRuns

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# 2 steps of 32 an epoch, 2 epochs, the learning rate stepped down after step 3 (so that a run
# killed after epoch 1 resumes before the step); refinement M = 2, K = 2, T = 2. ResNet-8 (one
# block per stack: an identity and two projection shortcuts, as ResNet-20 has) traces in half
# the time; ResNet-20's own layers are test_resnet_networks'.
TINY = dict(dataset="fashion_mnist", download=False, num_train_examples=64,
            num_test_examples=64, batch_size=32, epochs=2, decay_epochs=(1.5,),
            decay_factors=(0.1,), num_samples=2, num_auxiliary=2, steps_per_auxiliary=2,
            ensemble_members=2, batchnorm=True, depth=8)


@pytest.fixture(scope="module")
def method_runs(tmp_path_factory, data_dir_for):
  """Every method's run of TINY, made once and shared by the tests below (refined_vi and
  vi_equal_compute from the VI fit of the vi run)."""
  return MethodRuns(resnet_main.train_and_evaluate, ResNetConfig,
                    tmp_path_factory.mktemp("methods"), data_dir=data_dir_for("fashion_mnist"),
                    **TINY)


def test_epochs_give_the_papers_steps_and_schedule():
  """200 epochs of CIFAR-10 at 256: 39,063 steps; the authors' 30,000 steps are 153.6 epochs."""
  config = ResNetConfig()
  assert config.num_steps("vi", 50_000) == config.num_steps("deep_ensemble", 50_000) == 39_063
  assert ResNetConfig(epochs=153.6).num_steps("vi", 50_000) == 30_000
  schedule = config.learning_rate_schedule(50_000)
  assert schedule.boundaries == (15_625, 23_438, 31_250, 35_157)
  assert [schedule.rate(step) for step in (0, 15_624, 15_625, 35_156)] == pytest.approx(
      [1e-3, 1e-3, 1e-3 * PAPER_DECAY_FACTORS[0], 1e-3 * PAPER_DECAY_FACTORS[-2]])
  assert config.checkpoint_interval(50_000) == 196          # one epoch
  assert ResNetConfig(vi_steps=7).num_steps("vi", 50_000) == 7
  assert (config.num_auxiliary, config.variance_ratio, config.num_samples) == (10, 0.5, 10)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_writes_its_metrics(method_runs, method):
  """Every method end to end on ResNet-20 with batch norm. Catches: a method that fails to run
  or writes non-finite metrics, a predictive worse than its members, refinement without its
  figure, vi_equal_compute not given refinement's M K T extra steps."""
  metrics, recorded = method_runs(method)
  assert recorded["benchmark"] == "resnet" and recorded["flags"]["batchnorm"] is True
  assert recorded["metrics"] == pytest.approx(metrics)
  assert metrics["num_train"] == 64 and 0 <= metrics["test_accuracy"] <= 1
  assert np.isfinite(metrics["test_mll"]) and np.isfinite(metrics["ece"])
  # Two samples (members) average to an MLL no worse than each (Jensen).
  assert metrics["test_mll"] >= metrics["member_test_mll"] - 1e-9
  if method in ("vi", "refined_vi", "vi_equal_compute"):
    assert np.isfinite(metrics["elbo"])
  if method == "refined_vi":
    assert np.isfinite(metrics["elbo_aux"])
    assert (method_runs.root / method / "figure4_elbo_aux.png").exists()
  if method == "vi_equal_compute":
    assert metrics["total_vi_steps"] == 4 + 2 * 2 * 2


def test_full_variational_vi_scored_by_one_weight_sample_is_that_sample(tmp_path, method_runs):
  """VI of the full variational ResNet (both convolutions of every block Bayesian), scored as
  the authors scored it, by one weight sample: the predictive is that sample. Catches
  --num_eval_samples not reaching the predictive (planted: eval_samples() ignoring it; fails)."""
  metrics, recorded = method_runs.run("vi", tmp_path, variational="full", num_eval_samples=1,
                                      vi_checkpoint_dir=None)
  assert recorded["flags"]["variational"] == "full" and np.isfinite(metrics["elbo"])
  assert metrics["test_mll"] == pytest.approx(metrics["member_test_mll"], rel=1e-6)


@pytest.mark.parametrize("method", ["refined_vi", "deep_ensemble"])
def test_member_networks_train_where_grouped_conv_gradients_are_unsupported(tmp_path, monkeypatch,
                                                                            method, method_runs):
  """Refinement and the ensemble train their member ResNets with per-member convolution gradients.

  Catches: 'Gradients for grouped convolutions are not supported on CPU'.
  Both methods stack their members' convolutions into one grouped
  convolution, whose gradients TensorFlow's default CPU kernels refuse; they
  stopped at their first step on CPUs where TensorFlow leaves oneDNN off (an
  AVX2-only AMD EPYC) and ran where it is on. On such a CPU the module's
  shared runs are such runs; elsewhere pretending every machine is one
  exercises that path here too (refinement from the shared VI fit).
  """
  if member_convolution.grouped_conv_gradients_supported():
    monkeypatch.setattr(member_convolution, "grouped_conv_gradients_supported", lambda: False)
    metrics, _ = method_runs.run(method, tmp_path, num_auxiliary=1, steps_per_auxiliary=1,
                                 stage_elbo_aux=False)
  else:
    metrics, _ = method_runs(method)
  assert np.isfinite(metrics["test_mll"])
  if method == "refined_vi":
    assert np.isfinite(metrics["elbo_aux"])


class _Killed(Exception):
  """The process dying where it was raised."""


def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, method_runs):
  """Training killed right after its epoch-1 checkpoint (of 2 epochs) and rerun ends where an
  uninterrupted run (the shared vi run) ends.

  Catches: batch norm's moving statistics, the Adam state or the schedule's
  position lost in the per-epoch checkpoint. The kill stops the run before
  its ELBO and evaluation, which a killed run never reaches.
  """
  whole, _ = method_runs("vi")
  checkpoints = str(tmp_path / "resumed_checkpoints")
  save = training.CheckpointedTraining._save

  def save_then_die(trainer, checkpoint_dir):
    save(trainer, checkpoint_dir)
    raise _Killed(f"killed at step {int(trainer.step.numpy())}")
  with monkeypatch.context() as patched:
    patched.setattr(training.CheckpointedTraining, "_save", save_then_die)
    with pytest.raises(_Killed, match="^killed at step 2$"):
      method_runs.run("vi", tmp_path / "killed", vi_checkpoint_dir=checkpoints)
  resumed, _ = method_runs.run("vi", tmp_path / "resumed", vi_checkpoint_dir=checkpoints)
  assert resumed["vi_resumed_from_step"] == 2
  for name in ("test_mll", "elbo"):
    assert resumed[name] == pytest.approx(whole[name], rel=1e-5), name


def _run(*flags):
  return subprocess.run([sys.executable, "-m", "resnet.main", *flags], cwd=REPO,
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


BAD_FLAGS = [
    ("--variational=none", "--variational=none: value should be one of <hybrid|full>"),
    ("--dataset=svhn", "--dataset=svhn: value should be one of"),
    ("--method=mnf", "--method=mnf: value should be one of <vi|refined_vi|vi_equal_compute|deep_"),
    ("--num_auxiliary=0", "num_auxiliary=0 is out of range; allowed: >= 1"),
    ("--variance_ratio=1.5", "variance_ratio=1.5 is out of range"),
    ("--epochs=0", "epochs=0.0 is out of range; allowed: > 0"),
    ("--decay_factors=0.1", "--decay_epochs has 4 values but --decay_factors 1"),
    ("--decay_epochs=80,40,160,180", "must be increasing epochs > 0"),
    ("--depth=10", "--depth=10 is not a ResNet depth; allowed: 6n + 2 for n >= 1"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The binary's runs with each of BAD_FLAGS, made together."""
  return UsageRuns.in_output_dirs("resnet.main", tmp_path_factory.mktemp("refusals"),
                                  [[flag] for flag, _ in BAD_FLAGS],
                                  environment={"TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("flag,message", BAD_FLAGS)
def test_bad_flags_are_one_line_usage_errors(refusals, flag, message):
  completed, output_dir = refusals.in_output_dir(flag)
  assert completed.returncode == 2, completed.stderr[-1000:]
  assert message in completed.stderr.strip().splitlines()[-1]
  assert not output_dir.exists()


def test_refitting_needs_deterministic_weights_and_lenet_has_no_batch_norm(tmp_path):
  completed = subprocess.run(
      [sys.executable, "-m", "image.main", f"--output_dir={tmp_path}", "--refit_deterministic"],
      cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 2
  assert "have no point-estimated weights to refit" in completed.stderr.strip().splitlines()[-1]
  completed = subprocess.run(
      [sys.executable, "-m", "image.main", f"--output_dir={tmp_path}", "--batchnorm"],
      cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 2 and "Unknown command line flag 'batchnorm'" in completed.stderr


def test_missing_or_truncated_cifar10_is_a_runtime_error_naming_the_file(tmp_path):
  from common import images
  (tmp_path / "empty").mkdir()
  completed = _run(f"--output_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'empty'}",
                   "--nodownload")
  assert completed.returncode == 1
  assert "cifar-10-binary.tar.gz is not in" in completed.stderr.strip().splitlines()[-1]
  folder = images.write_synthetic_cifar10(str(tmp_path / "data" / "cifar10"),
                                          examples_per_batch=3)
  batch = os.path.join(folder, "data_batch_2.bin")
  with open(batch, "r+b") as handle:
    handle.truncate(3073 * 2 + 100)
  completed = _run(f"--output_dir={tmp_path / 'out'}", f"--data_dir={tmp_path / 'data'}",
                   "--nodownload")
  assert completed.returncode == 1 and "data_batch_2.bin" in completed.stderr.strip(
  ).splitlines()[-1]
  assert not (tmp_path / "out" / "results.json").exists()


def test_the_speed_projection_adds_up_every_run_of_table3():
  from benchmarks.resnet_speed import (EQUAL_COMPUTE_STEPS, MEASUREMENTS, REFINE_STEPS, SEEDS,
                                       VI_STEPS, derived)
  projected = derived({name: {"seconds_per_step": 1.0} for name in MEASUREMENTS})
  assert projected["refinement_fraction_of_vi"] == pytest.approx(REFINE_STEPS / VI_STEPS)
  per_seed = 4 * (VI_STEPS + EQUAL_COMPUTE_STEPS + REFINE_STEPS) + 2 * VI_STEPS
  assert projected["projected_hours"]["table3"] == pytest.approx(SEEDS * per_seed / 3600)
