"""UCI regression benchmark (paper Table 1): one dataset, one method, one seed per run.

  python -m uci.main --dataset=boston_housing --method=refined_vi --seed=0 \
      --output_dir=results/uci/boston_housing/refined_vi/seed_0

Protocol (paper Section 4.2): a random 80/20 split from the seed (or
`--split=standard_90_10`), inputs and targets standardised with training
statistics, one hidden layer of 50 ReLU units, a Gaussian likelihood whose
noise scale is one learned point estimate, test MLL and RMSE in the original
units of y. Methods:
  vi                 mean-field VI (30,000 steps), M draws for the predictive;
  refined_vi         VI, then M refined samples (Algorithm 1, K = 5, ratio 0.7);
  vi_equal_compute   VI trained further for M * K * T more steps, the Adam
                     steps refinement spends (the fair-compute baseline);
  mnf                multiplicative normalizing flows, 30,000 steps;
  deep_ensemble      10 heteroscedastic members, 5,000 adversarial steps each.
VI training checkpoints into `--vi_checkpoint_dir` (default under the output
directory); the vi, refined_vi and vi_equal_compute runs of one dataset and
seed may share it, so the mean-field model is trained once. Reruns resume.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

import numpy as np
import tf_keras
from absl import flags

from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.predictive import posterior_draws
from baselines import deep_ensemble, mnf
from baselines.vi_family import VI_FAMILY, RefinedViConfig, run_vi_family
from common import cli
from uci.regression import HomoscedasticNoise, gaussian_head_log_likelihood, regression_metrics
from common.results import write_results
from common.seeding import seed_everything
from uci import data

METHODS = ("vi", "refined_vi", "vi_equal_compute", "mnf", "deep_ensemble")


@dataclasses.dataclass
class UciConfig(RefinedViConfig):
  dataset: str = "boston_housing"
  method: str = "refined_vi"
  data_dir: Optional[str] = None
  download: bool = True
  split: str = "random_80_20"
  hidden_units: int = 50
  initial_noise_scale: float = 1.0
  mnf_steps: int = 30_000
  ensemble_members: int = 10
  ensemble_steps: int = 5_000
  adversarial_epsilon: float = 0.01

  def check(self) -> None:
    """Raises ValueError naming the first bad value and what is allowed."""
    data.check_name(self.dataset)
    if self.method not in METHODS:
      raise ValueError(f"unknown method {self.method!r}; allowed: {', '.join(METHODS)}")
    if self.split not in data.SPLITS:
      raise ValueError(f"unknown split {self.split!r}; allowed: {', '.join(data.SPLITS)}")
    self.check_vi_family()
    for name in ("hidden_units", "mnf_steps", "ensemble_members", "ensemble_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
    if not self.initial_noise_scale > 0 or self.adversarial_epsilon < 0:
      raise ValueError(f"initial_noise_scale={self.initial_noise_scale} must be > 0 and "
                       f"adversarial_epsilon={self.adversarial_epsilon} >= 0")


def mean_field_network(hidden_units: int, initial_noise_scale: float, num_members: Optional[int] = None,
                       empirical_bayes_prior: bool = True) -> tf_keras.Sequential:
  """50 ReLU units with Gaussian mean-field weights, then the learned homoscedastic noise scale."""
  return tf_keras.Sequential([
      DenseReparameterization(hidden_units, activation="relu", num_members=num_members,
                              trainable_prior_scale=empirical_bayes_prior),
      DenseReparameterization(1, num_members=num_members, kernel_initializer="glorot_uniform",
                              trainable_prior_scale=empirical_bayes_prior),
      HomoscedasticNoise(num_members=num_members, initial_scale=initial_noise_scale)])


def _noise_scale(model) -> float:
  return float(np.mean([layer.noise_scale.numpy() for layer in model.layers if isinstance(layer, HomoscedasticNoise)]))


def run_method(config: UciConfig, split: data.RegressionData, output_dir: str) -> tuple[dict, dict]:
  """Trains and evaluates one method; returns (metrics, timings)."""
  x, y = split.x_train, split.y_train

  def evaluate(outputs):
    return regression_metrics(outputs, split.y_test_original, split.target_mean, split.target_std)

  if config.method in VI_FAMILY:
    run = run_vi_family(
        config.method, config,
        lambda members: mean_field_network(config.hidden_units, config.initial_noise_scale, members,
                                           config.empirical_bayes_prior),
        x, y, gaussian_head_log_likelihood, output_dir)
    metrics, timings = run.metrics, run.timings
    metrics["noise_scale"] = _noise_scale(run.model) * split.target_std   # after any extra training
    metrics.update(evaluate(run.sample_outputs(split.x_test)))
    return metrics, timings
  metrics, timings = {}, {}
  if config.method == "mnf":
    mean_network = mnf.regression_mnf(config.hidden_units, seed=config.seed)
    model = tf_keras.Sequential(mean_network.layers + [HomoscedasticNoise(initial_scale=config.initial_noise_scale)])
    training = mnf.train_mnf(model, x, y, gaussian_head_log_likelihood, num_steps=config.mnf_steps,
                             learning_rate=config.learning_rate, batch_size=config.batch_size, seed=config.seed,
                             checkpoint_dir=os.path.join(output_dir, "checkpoints", "mnf"),
                             summary_dir=os.path.join(output_dir, "summaries", "mnf"),
                             steps_per_checkpoint=config.steps_per_checkpoint)
    timings["train_seconds"] = training.train_seconds
    metrics.update(evaluate(posterior_draws(model, split.x_test, config.num_samples)))
    metrics["noise_scale"] = _noise_scale(model) * split.target_std
  else:
    model = deep_ensemble.regression_ensemble(config.ensemble_members, config.hidden_units, seed=config.seed)
    training = deep_ensemble.train_deep_ensemble(
        model, x, y, gaussian_head_log_likelihood, num_members=config.ensemble_members,
        num_steps=config.ensemble_steps, learning_rate=config.learning_rate, batch_size=config.batch_size,
        epsilon=config.adversarial_epsilon, seed=config.seed,
        checkpoint_dir=os.path.join(output_dir, "checkpoints", "deep_ensemble"),
        summary_dir=os.path.join(output_dir, "summaries", "deep_ensemble"),
        steps_per_checkpoint=config.steps_per_checkpoint)
    timings["train_seconds"] = training.train_seconds
    metrics.update(evaluate(model(split.x_test)))
  return metrics, timings


def train_and_evaluate(config: UciConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` and returns its metrics."""
  config.check()
  started = time.perf_counter()
  seed_everything(config.seed)
  features, targets = data.load(config.dataset, config.data_dir, config.download)
  num_splits = data.num_standard_splits(config.dataset, config.data_dir, config.download)
  split = data.prepare(features, targets, config.split, config.seed, num_splits)
  metrics, timings = run_method(config, split, output_dir)
  metrics.update(num_train=len(split.y_train), num_test=len(split.y_test))
  timings["total_seconds"] = time.perf_counter() - started
  write_results(output_dir, benchmark="uci", dataset=config.dataset, method=config.method, seed=config.seed,
                flags=dataclasses.asdict(config), metrics=metrics, timings=timings)
  return metrics


_FIELDS = {field.name: field for field in dataclasses.fields(UciConfig)}


def define_flags() -> None:
  """The binary's flags (defined on demand, so that tests can import this module beside others)."""
  flags.DEFINE_string("output_dir", None, "Where results.json, checkpoints and summaries go.")
  flags.DEFINE_enum("dataset", "boston_housing", sorted(data.DATASETS), "UCI dataset (the paper's names).")
  flags.DEFINE_enum("method", "refined_vi", list(METHODS), "Method to train and evaluate.")
  flags.DEFINE_integer("seed", 0, "Seed of the split, the initialisation and every random stream.")
  flags.DEFINE_string("data_dir", data.default_data_dir(), "Local UCI directory (<dir>/<dataset>/data.txt); "
                      "default $REFINED_VI_DATA_DIR/uci. Missing files are downloaded and checksummed.")
  flags.DEFINE_bool("download", True, "Download missing files (else a missing file is an error).")
  flags.DEFINE_enum("split", "random_80_20", list(data.SPLITS), "Split protocol (standard_90_10: split = seed).")
  flags.DEFINE_string("vi_checkpoint_dir", None, "Shared VI checkpoint directory (default under output_dir).")
  cli.define_config_flags(UciConfig, exclude=("dataset", "method", "seed", "data_dir", "download", "split",
                                              "vi_checkpoint_dir"))


def main(argv):
  del argv
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  config = UciConfig(**cli.flag_values([name for name in _FIELDS]))
  metrics = train_and_evaluate(config, flags.FLAGS.output_dir)
  for name in ("test_mll", "test_rmse", "elbo", "elbo_aux"):
    if name in metrics:
      print(f"{name}: {metrics[name]:.4f}")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
