"""The LeNet-5 binary end to end on real MNIST at tiny scale: every method, Figure 4, bad input;
and the data statistics it standardises with and the posterior draws it evaluates."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from common import images
from common.results import TEST_LOG_PREDICTIVE_FILENAME
from runner import refinement_figures as figures
from runner.config import MEAN_FIELD, REFINED
from image import main as image_main
from image.config import METHODS, ImageConfig, pixel_scaling_for
from methods import registry
from methods.vogn import VognConfig
from tests.method_runs import MethodRuns
from tests.usage_runs import UsageRuns

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Batches of 32 and M = 2 samples: a LeNet-5 step's cost is its batch's, refinement's steps cost
# M times a VI step's. With them every method still beats chance
# by far (below) and each stage of the staircase gains ~10 standard errors of its 5-step ends
# (measured: VI 89 %, MNF 90 %, the ensemble 90 %, VOGN 35 % accurate; stage gains 10,000 nats).
TINY = dict(dataset="mnist", download=False, num_train_examples=1024,
            num_test_examples=300, vi_steps=80, num_samples=2, num_auxiliary=3,
            steps_per_auxiliary=20, mnf_steps=60, ensemble_members=2, ensemble_steps=60,
            steps_per_checkpoint=100, batch_size=32)


@pytest.fixture(name="mnist_dir")
def _mnist_dir(data_dir_for):
  return data_dir_for("mnist")


@pytest.fixture(name="tiny")
def _tiny(mnist_dir):
  """TINY reading MNIST from the data folder."""
  return dict(TINY, data_dir=mnist_dir)


@pytest.fixture(scope="module")
def method_runs(tmp_path_factory, data_dir_for):
  """Every method's run of TINY, made once and shared by the tests below."""
  return MethodRuns(image_main.train_and_evaluate, ImageConfig, tmp_path_factory.mktemp("methods"),
                    data_dir=data_dir_for("mnist"), **TINY)


# Two methods are compositions of parts run here: refined_vogn is the vogn fit then refined_vi's
# refinement, vi_equal_compute the vi fit trained further; both compositions run end to end in
# test_uci_main (and vi_equal_compute in test_resnet_main, with its step count), so they are left
# out here (their LeNet-5 runs took a minute).
COMPOSED = ("refined_vogn", "vi_equal_compute")


@pytest.mark.parametrize("method", [method for method in METHODS if method not in COMPOSED])
def test_every_method_writes_its_metrics(method_runs, method):
  """Every method but the COMPOSED ones end to end on MNIST. Catches: a method that does not
  learn (chance accuracy), refinement that does not climb (ELBO_aux, the per-stage and whole-data
  staircases; planted: refinement's steps descending the ELBO, fails), a predictive worse than
  its members, metrics missing from results.json."""
  metrics, results = method_runs(method)
  output = method_runs.root / method
  assert results["benchmark"] == "image" and results["method"] == method
  assert results["metrics"] == pytest.approx(metrics)
  assert metrics["num_train"] == 1024 and metrics["num_test"] == 300 and metrics[
      "peak_memory_mb"] > 100
  # A few steps on 1,024 digits already beat chance (10 %, MLL log 0.1) by far. VOGN's 150 steps
  # at its default step size land anywhere from 18 % to 77 % here (10 seeds, with either normal
  # sampler, batches of 64; with this seed's batches of 32, 41 % after 150 steps, 35 % after 80),
  # so it is held to beating chance by 3 standard errors of 300 test digits.
  min_accuracy = 0.15 if issubclass(registry.method(method).config, VognConfig) else 0.5
  assert metrics["test_accuracy"] > min_accuracy and np.log(0.1) < metrics["test_mll"] < 0
  assert 0 <= metrics["ece"] < 1 and 0 <= metrics["brier"] < 1
  # Averaging samples (members) never lowers the MLL below the members' own mean (Jensen).
  assert np.log(0.1) < metrics["member_test_mll"] <= metrics["test_mll"] and metrics[
      "member_test_accuracy"] > min_accuracy
  assert {"train_seconds", "evaluate_seconds", "total_seconds"} <= set(results["timings"])
  if method in MEAN_FIELD:
    assert metrics["elbo"] < 0
    assert metrics["elbo"] == pytest.approx(
        metrics["elbo_expected_log_likelihood"] - metrics["elbo_kl"], rel=1e-9)
    assert metrics["elbo_kl"] > 0 > metrics["elbo_expected_log_likelihood"]
  if method in REFINED:
    assert metrics["elbo_aux"] > metrics["elbo"]
    assert metrics["elbo_aux"] == pytest.approx(
        metrics["elbo_aux_expected_log_likelihood"] - metrics["elbo_aux_kl"], rel=1e-9)
    trace = pd.read_csv(output / figures.TRACE_FILENAME)
    assert len(trace) == 3 * 20 and list(trace.auxiliary_variable.unique()) == [1, 2, 3]
    assert [c for c in trace.columns if c.startswith("member_")] == ["member_0", "member_1"]
    # The staircase: each auxiliary variable ends higher than the previous one ended.
    ends = trace.groupby("auxiliary_variable").elbo_aux_mean.apply(
        lambda v: v.iloc[-5:].mean()).to_numpy()
    assert np.all(np.diff(ends) > 0)
    # The whole-training-set staircase: the VI ELBO, then ELBO_aux after each stage, ending at the
    # result.
    stages = pd.read_csv(output / figures.TRACE_STAGES_FILENAME)
    assert list(stages.auxiliary_variable) == [0, 1, 2, 3] and list(stages.step) == [0, 20, 40, 60]
    assert stages.elbo_aux_mean.iloc[0] == pytest.approx(metrics["elbo_start_members"], rel=1e-6)
    assert stages.elbo_aux_mean.iloc[-1] == pytest.approx(metrics["elbo_aux"], rel=1e-6)
    assert stages.elbo_aux_mean.iloc[1] > stages.elbo_aux_mean.iloc[0]
    assert results["timings"]["stage_elbo_seconds"] > 0
    assert (output / figures.FIGURE_FILENAME).stat().st_size > 10_000
  else:
    assert "elbo_aux" not in metrics and not (output / figures.TRACE_FILENAME).exists()
    assert not (output / figures.TRACE_STAGES_FILENAME).exists()


def test_each_test_examples_log_predictive_is_kept_in_the_test_sets_order(method_runs):
  """test_log_predictive.npy beside results.json: one log p(y_n | x_n) per test digit, whose
  mean is test_mll, in the test set's order, so two runs' files pair example by example (an
  MLL difference's standard error on one seed). Catches a file of other values (its mean is not
  test_mll) and runs writing in orders of their own: VI's and the ensemble's hard digits are the
  same digits (their values correlate 0.78; planted, each run permuting its values its own way:
  -0.04, fails)."""
  per_example = {}
  for method in ("vi", "deep_ensemble"):
    metrics, _ = method_runs(method)
    values = np.load(method_runs.root / method / TEST_LOG_PREDICTIVE_FILENAME)
    assert values.dtype == np.float32 and values.shape == (300,) and np.all(values <= 0)
    assert float(np.mean(values, dtype=np.float64)) == pytest.approx(metrics["test_mll"], rel=1e-6)
    per_example[method] = values
  assert np.corrcoef(per_example["vi"], per_example["deep_ensemble"])[0, 1] > 0.3


def _run(*args):
  return subprocess.run([sys.executable, "-m", "image.main", *args], cwd=REPO, capture_output=True,
                        text=True, timeout=300, env={
                            **os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"
                        })


BAD_FLAGS = [
    (["--dataset=svhn"], "value should be one of"),
    (["--method=sgld"], "value should be one of"),
    (["--num_train_examples=-1"], "num_train_examples=-1 is out of range; allowed: >= 0"),
    (["--variance_ratio=0"], "variance_ratio=0.0 is out of range; allowed: > 0 and < 1"),
    (["--initial_untransformed_posterior_scale=9"
     ], "initial_untransformed_posterior_scale=9.0 is out of range; allowed: >= -20 and <= 5"),
    (["--initial_untransformed_posterior_scale=-inf"
     ], "initial_untransformed_posterior_scale=-inf must be a finite"),
    (["--pixel_scaling=zscore"], "value should be one of"),
    (["--ensemble_kernel_initializer=orthogonal"], "value should be one of"),
    (["--method=mnf", "--use_bfloat16"], "--use_bfloat16 with --method=mnf: MNF's normalizing"),
    (["--method=svgd"], "value should be one of"),
    (["--vi_optimizer=lbfgs"], "value should be one of <adam|momentum|misso>"),
    (["--vi_momentum=1"], "vi_momentum=1.0 is out of range; allowed: >= 0 and < 1"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The binary's runs with each of BAD_FLAGS, made together."""
  return UsageRuns.in_output_dirs("image.main", tmp_path_factory.mktemp("refusals"),
                                  [flags for flags, _ in BAD_FLAGS],
                                  environment={"TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.parametrize("flags,message", BAD_FLAGS)
def test_bad_flags_give_one_line_and_no_results(refusals, flags, message):
  completed, output_dir = refusals.in_output_dir(*flags)
  assert completed.returncode == 2
  assert message in completed.stderr.strip().splitlines()[-1]
  assert not output_dir.exists()


def test_ensemble_protocol_options_reach_the_run_and_are_recorded(tmp_path, method_runs):
  """By default the ensemble gets [0, 1] pixels and Glorot kernels.

  The suite's VI protocol is a flag away.
  """
  paper, results = method_runs("deep_ensemble")
  vi_like, _ = method_runs.run("deep_ensemble", tmp_path / "vi_like", pixel_scaling="standardise",
                               ensemble_kernel_initializer="he_normal")
  assert paper["test_accuracy"] > 0.5 and abs(paper["test_mll"] - vi_like["test_mll"]) > 1e-3
  recorded = results["flags"]
  assert recorded["pixel_scaling"] == "unit_interval" and recorded[
      "ensemble_kernel_initializer"] == "glorot_uniform"
  for name in ("pixel_scaling", "ensemble_kernel_initializer"):
    with pytest.raises(ValueError, match=f"{name}='bad' is not allowed; allowed: one of "):
      ImageConfig(**{name: "bad"}).validate()


@pytest.mark.parametrize("method,scaling", [("vi", "standardise"), ("mnf", "standardise"),
                                            ("deep_ensemble", "unit_interval")])
def test_by_method_pixel_scaling_follows_each_rows_source(method, scaling):
  assert ImageConfig(method=method).pixel_scaling == scaling == pixel_scaling_for(
      method, "by_method")
  assert ImageConfig(method=method, pixel_scaling="standardise").pixel_scaling == "standardise"


def test_pixel_statistics_are_numpys_float64_mean_and_std_of_the_scaled_pixels():
  """`channel_statistics` counts each channel's 256 byte values instead of numpy's float64 pass
  over every pixel (2-15 s of every MNIST run): the same float32 statistics, bit for bit."""
  rng = np.random.default_rng(0)
  for shape, zeros in (([600, 28, 28, 1], 0.8), ([300, 32, 32, 3], 0.0), ([7, 5, 5, 2], 0.3)):
    pixels = rng.binomial(255, rng.uniform(0.05, 0.6, shape[-1]), size=shape)
    pixels = np.where(rng.uniform(size=shape) < zeros, 0, pixels).astype(np.uint8)
    scaled = pixels.astype(np.float32) / 255.0
    mean, std = images.channel_statistics(pixels)
    assert mean.dtype == std.dtype == np.float32 and mean.shape == (shape[-1],)
    np.testing.assert_array_equal(
        mean, scaled.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32))
    np.testing.assert_array_equal(std,
                                  scaled.std(axis=(0, 1, 2), dtype=np.float64).astype(np.float32))
  with pytest.raises(ValueError, match="counts uint8 pixels, not float32"):
    images.channel_statistics(scaled)


def test_traced_posterior_draws_trace_the_network_once_and_draw_what_one_call_each_draws():
  """An evaluation's M posterior draws in a traced function are one loop: the network is traced
  once, not M times (M = 10 LeNet-5 or ResNet-20 forward passes were traced ten times), and the
  draws are those of M calls in a row, bit for bit."""
  import tensorflow as tf
  from auxiliary_sampling.graph_loops import graph_function
  from auxiliary_sampling.predictive import posterior_draws
  from image import lenet
  model = lenet.mean_field_lenet5()
  inputs = tf.random.stateless_normal([5, 28, 28, 1], seed=[1, 2])
  model(inputs)
  counters = [layer.noise.counter for layer in model.chain if hasattr(layer, "noise")]
  start = [counter.numpy() for counter in counters]
  traced = []

  def network(images):
    traced.append(1)
    return model(images)
  draws = graph_function(lambda images: posterior_draws(network, images, 4))(inputs)
  assert len(traced) == 1 and draws.shape == (4, 5, 10)
  for counter, value in zip(counters, start):
    counter.assign(value)
  np.testing.assert_array_equal(draws, tf.stack([model(inputs) for _ in range(4)]))


@pytest.mark.parametrize("trainer", ["vi", "mnf", "deep_ensemble"])
def test_paper_scale_runs_checkpoint_several_times_before_their_end(trainer):
  """Catches a checkpoint interval as long as the run: the 10-member ensemble's 5,000 steps took
  two hours here with no checkpoint before the last step, so a kill lost all of it."""
  config = ImageConfig(method=trainer)
  steps = config.num_steps(trainer, 60_000)
  assert steps >= 5 * config.checkpoint_interval(60_000)


def test_bad_data_is_a_runtime_error_naming_the_file(tmp_path, data_dir_for):
  """A corrupt or missing file ends the run with its one line before TensorFlow loads (the only
  stderr line), exit 1, and no output folder left."""
  corrupted = tmp_path / "data" / "fashion_mnist"
  shutil.copytree(os.path.join(data_dir_for("fashion_mnist"), "fashion_mnist"), corrupted)
  (corrupted / "train-labels-idx1-ubyte.gz").chmod(0o644)
  (corrupted / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b truncated")
  completed = _run(f"--output_dir={tmp_path / 'out'}", "--dataset=fashion_mnist",
                   f"--data_dir={corrupted.parent}", "--nodownload")
  lines = completed.stderr.strip().splitlines()
  assert completed.returncode == 1 and len(lines) == 1, lines
  assert lines[0].startswith(
      "error: checksum mismatch for") and "train-labels-idx1-ubyte.gz" in lines[0]
  (tmp_path / "empty").mkdir()
  completed = _run(f"--output_dir={tmp_path / 'out'}", "--dataset=cifar10",
                   f"--data_dir={tmp_path / 'empty'}", "--nodownload")
  lines = completed.stderr.strip().splitlines()
  assert completed.returncode == 1 and len(lines) == 1, lines
  assert "cifar-10-binary.tar.gz is not in" in lines[0]
  assert not (tmp_path / "out").exists()


def test_cifar10_smoke_run_on_synthetic_files(tmp_path):
  """No CIFAR-10 copy exists here: the binary runs on files in the real format (32x32x3 LeNet-5)."""
  from common import images
  images.write_synthetic_cifar10(str(tmp_path / "data" / "cifar10"), examples_per_batch=100, seed=0)
  config = ImageConfig(
      **{
          **TINY, "dataset": "cifar10",
          "data_dir": str(tmp_path / "data"),
          "num_train_examples": 0,
          "num_test_examples": 0,
          "method": "vi",
          "vi_steps": 15
      })
  metrics = image_main.train_and_evaluate(config, str(tmp_path / "out"))
  assert metrics["num_train"] == 500 and metrics["num_test"] == 100
  # The class sets the mean colour: learnable in 15 steps (measured: 82 of 100 test images right;
  # all 100 after 50 steps). Test labels that do not belong to their images score chance (10 %).
  assert metrics["test_accuracy"] > 0.3


def test_synthetic_cifar10_writer_binary(tmp_path):
  completed = subprocess.run([
      sys.executable, "-m", "image.make_synthetic_cifar10", f"--output_dir={tmp_path}",
      "--examples_per_batch=3"
  ], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 0, completed.stderr[-2000:]
  assert (tmp_path / "cifar-10-batches-bin" / "data_batch_5.bin").stat().st_size == 3 * 3073
  completed = subprocess.run([
      sys.executable, "-m", "image.make_synthetic_cifar10", f"--output_dir={tmp_path}",
      "--examples_per_batch=0"
  ], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 2 and "--examples_per_batch=0 must be >= 1" in completed.stderr


def test_speed_benchmark_writes_its_measurements(tmp_path, mnist_dir):
  """The speed binary end to end (one measurement, one step: its files, not its numbers)."""
  completed = subprocess.run([
      sys.executable, "-m", "benchmarks.image_speed", "--measurements=vi", "--steps=1",
      "--rounds=1", f"--data_dir={mnist_dir}", f"--output_dir={tmp_path}"
  ], cwd=REPO, capture_output=True, text=True, timeout=300, env={
      **os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"
  })
  assert completed.returncode == 0, completed.stderr[-2000:]
  measured = json.loads((tmp_path / "speed.json").read_text())
  assert measured["vi"]["measurement"] == "vi" and measured["vi"]["peak_memory_mb"] > 100
  assert measured["derived"]["vi_ms_per_step"] == pytest.approx(1000 *
                                                                measured["vi"]["seconds_per_step"])
  assert ("refine" not in measured and
          "refinement_fraction_of_vi_training" not in measured["derived"])
  assert measured["command"].endswith(f"--output_dir={tmp_path}") and measured["git_commit"]
  assert "| vi |" in (tmp_path / "speed.md").read_text()
  completed = subprocess.run([
      sys.executable, "-m", "benchmarks.image_speed", "--measurements=vi,sgd",
      f"--output_dir={tmp_path / 'bad'}"
  ], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 2 and "--measurements has 'sgd'; allowed: vi, " in completed.stderr
  assert not (tmp_path / "bad").exists()


def test_refinement_without_optimisation_steps(tmp_path, method_runs):
  """--steps_per_auxiliary=0, what the authors' code effectively ran on images: every a_k drawn,
  no Adam step (from the VI fit the other refined run shares). Catches the figure crashing on the
  empty per-step trace after a whole run (it did, on ResNet-20) and a stage staircase that moves
  without optimisation."""
  metrics, _ = method_runs.run("refined_vi", tmp_path, steps_per_auxiliary=0)
  assert len(pd.read_csv(tmp_path / figures.TRACE_FILENAME)) == 0
  stages = pd.read_csv(tmp_path / figures.TRACE_STAGES_FILENAME)
  assert list(stages.auxiliary_variable) == [0, 1, 2, 3] and set(stages.step) == {0}
  # Conditioning alone keeps the ELBO in expectation (the KL chain rule): only sampling noise moves
  # it, far less than a few refinement steps gain.
  # (Measured after 150 VI steps: a spread of 10 nats on an ELBO of -1.78e6; a wrong conditional
  # variance moves the KL of 60,000 weights by far more.)
  assert np.ptp(stages.elbo_aux_mean) < 1e-4 * abs(metrics["elbo"])
  assert metrics["elbo_aux"] == pytest.approx(metrics["elbo"], rel=1e-4)
  # And so does each of its terms: the fit and the KL (chain rule: the log ratios and the
  # conditional KL add up to the mean-field KL).
  assert metrics["elbo_aux_expected_log_likelihood"] == pytest.approx(
      metrics["elbo_expected_log_likelihood"], abs=1e-5 * abs(metrics["elbo"]))
  assert metrics["elbo_aux_kl"] == pytest.approx(metrics["elbo_kl"], rel=1e-4)
  assert (tmp_path / figures.FIGURE_FILENAME).stat().st_size > 10_000
  assert np.log(0.1) < metrics["test_mll"] < 0


def test_vi_optimisers_run_and_the_misso_figure_draws_them(tmp_path, tiny):
  """--vi_optimizer and --vi_weight_noise reach VI, and report.misso_figure reads each run's ELBO
  summaries (logged at every checkpoint: MISSO's steps 30 and 60, the other run's 20 and 40).

  MISSO's blocks cover the 1,024 digits in 16 steps without moving (its initialisation pass), then
  it moves: the KL, a function of the variational parameters alone, stays put for exactly the first
  17 steps (an optimiser that is not MISSO moves it from step 2). 60 steps are MISSO's shortest run
  that still clears 0.2 accuracy by as much as 100 steps did (measured: 26 % at 60 steps, 27 % at
  100, 22 % at 40); Adam with one weight draw per step needs 40 (66 %)."""
  from report import misso_figure
  for name, flags in (("misso", dict(vi_optimizer="misso", learning_rate=0.01, vi_steps=60,
                                     steps_per_checkpoint=30)),
                      ("bbb", dict(vi_weight_noise="per_batch", vi_steps=40,
                                   steps_per_checkpoint=20))):
    config = ImageConfig(**{**tiny, "method": "vi", "batch_size": 64, **flags})
    metrics = image_main.train_and_evaluate(config, str(tmp_path / "runs" / name))
    assert metrics["test_accuracy"] > 0.2, name   # chance: 0.1 (s.e. 0.017 on 300 digits)
  kl = np.load(tmp_path / "runs" / "misso" / "checkpoints" / "vi" / "trace.npz")["kl_trace"]
  assert np.all(kl[:17] == kl[0]) and np.all(kl[17:] != kl[0])
  text = misso_figure.write_figure(str(tmp_path / "runs"), str(tmp_path))
  curves = pd.read_csv(tmp_path / "figure1.csv")
  assert set(curves.optimiser) == {"MISSO, lr 0.01",
                                   "Bayes by backprop (Adam, one weight draw per step), lr 0.001"}
  assert list(curves[curves.run == "misso"].epoch) == [30 * 64 / 1024, 60 * 64 / 1024]
  assert list(curves[curves.run == "bbb"].epoch) == [20 * 64 / 1024, 40 * 64 / 1024]
  assert (curves.negated_elbo_per_example > 0).all()
  assert (tmp_path / "figure1.png").stat().st_size > 10_000 and "MISSO" in text
