"""LeNet-5 image classification (paper Table 2, Figure 4): one dataset, one method, one seed per run.

  python -m image.main --dataset=mnist --method=refined_vi --seed=0 \\
      --output_dir=results/image/mnist/refined_vi/seed_0 \\
      --vi_checkpoint_dir=results/image/mnist/vi_checkpoints/seed_0

Protocol (paper Sections 4.1 and 4.3): the standard train/test split,
per-channel standardisation with training statistics (the ensemble: [0, 1]
pixels), no augmentation, LeNet-5 with a Categorical likelihood, batch 256,
Adam 1e-3. Methods:
  vi                 mean-field VI (Flipout convolutions, local reparameterisation
                     dense layers), 30,000 steps; M = 10 draws for the predictive;
  refined_vi         VI, then M = 10 refined samples (K = 5, ratio 0.7, 200 steps
                     each); also writes the ELBO_aux trace and Figure 4;
  vi_equal_compute   VI trained further for M * K * T more steps;
  mnf                MNF LeNet-5, 30,000 steps;
  deep_ensemble      10 deterministic LeNet-5s, 5,000 steps each, no adversarial training,
                     Glorot-uniform kernels and [0, 1] pixels as in uncertainty-baselines'
                     deterministic LeNet-5, the source of the paper's ensemble numbers.
Metrics: test MLL, accuracy, Brier score, ECE; ELBO and ELBO_aux on the whole
training set; wall times and peak memory.
"""
from __future__ import annotations

import dataclasses
import os
import resource
import time
from typing import Optional

import numpy as np
from absl import flags

from auxiliary_sampling.parameters import INITIAL_UNTRANSFORMED_POSTERIOR_SCALE
from auxiliary_sampling.predictive import categorical_log_likelihood, posterior_draws
from auxiliary_sampling.refine import RefinementResult
from baselines import deep_ensemble, mnf
from baselines.vi_family import VI_FAMILY, RefinedViConfig, run_vi_family
from common import cli, images
from common.classification_metrics import (classification_metrics, member_metrics, predict_member_log_probabilities,
                                   predictive_log_probabilities)
from image.figures import plot_elbo_aux_staircase
from common.results import check_finite, write_csv_atomically, write_results
from common.seeding import seed_everything
from image import lenet

METHODS = VI_FAMILY + ("mnf", "deep_ensemble")
PIXEL_SCALINGS = ("by_method",) + images.PIXEL_SCALINGS
TRACE_FILENAME = "elbo_aux_trace.csv"
FIGURE_FILENAME = "figure4_elbo_aux.png"


@dataclasses.dataclass
class ImageConfig(RefinedViConfig):
  dataset: str = "mnist"
  method: str = "refined_vi"
  data_dir: Optional[str] = None
  download: bool = True
  source: str = "files"
  elbo_num_samples: int = 1               # per member; the 10 refined members give 10 draws in all
  mnf_steps: int = 30_000
  ensemble_members: int = 10
  ensemble_steps: int = 5_000
  # Glorot-uniform as uncertainty-baselines' ensemble (the paper's), or He-normal as the suite's other LeNet-5s.
  ensemble_kernel_initializer: str = "glorot_uniform"
  # "by_method": each method's source's; or one of images.PIXEL_SCALINGS for every method.
  pixel_scaling: str = "by_method"
  eval_batch_size: int = 500
  num_train_examples: int = 0             # 0: the whole training set (fewer: smoke runs)
  num_test_examples: int = 0              # 0: the whole test set
  # softplus of this is the VI posterior's initial scale; -7 (9e-4) is the authors' code.
  initial_untransformed_posterior_scale: float = INITIAL_UNTRANSFORMED_POSTERIOR_SCALE
  # refined_vi: the whole-training-set ELBO_aux after every stage, Figure 4's staircase without minibatch
  # noise (K - 1 more ELBO estimates, timed as stage_elbo_seconds; the refined samples are unchanged).
  stage_elbo_aux: bool = True

  def check(self) -> None:
    """Raises ValueError naming the first bad value and what is allowed."""
    images.check_name(self.dataset)
    if self.method not in METHODS:
      raise ValueError(f"unknown method {self.method!r}; allowed: {', '.join(METHODS)}")
    if self.source not in images.SOURCES:
      raise ValueError(f"unknown source {self.source!r}; allowed: {', '.join(images.SOURCES)}")
    if self.pixel_scaling not in PIXEL_SCALINGS:
      raise ValueError(f"unknown pixel_scaling {self.pixel_scaling!r}; allowed: {', '.join(PIXEL_SCALINGS)}")
    if self.ensemble_kernel_initializer not in lenet.ENSEMBLE_KERNEL_INITIALIZERS:
      raise ValueError(f"unknown ensemble_kernel_initializer {self.ensemble_kernel_initializer!r}; "
                       f"allowed: {', '.join(lenet.ENSEMBLE_KERNEL_INITIALIZERS)}")
    self.check_vi_family()
    for name in ("mnf_steps", "ensemble_members", "ensemble_steps", "eval_batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
    if not -20.0 <= self.initial_untransformed_posterior_scale <= 5.0:
      raise ValueError(f"initial_untransformed_posterior_scale={self.initial_untransformed_posterior_scale} "
                       "must be in [-20, 5] (softplus: scales 2e-9 to 5)")
    for name in ("num_train_examples", "num_test_examples"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 0 (0: all)")


def pixel_scaling_of(config: ImageConfig) -> str:
  """The pixel scaling a run uses; "by_method" follows the code behind each of the paper's rows.

  The deep ensemble's row is uncertainty-baselines' deterministic LeNet-5 (its
  README reports the paper's ensemble numbers), which feeds [0, 1] pixels; the
  VI family and MNF standardise per channel, as the authors' code does.
  """
  if config.pixel_scaling != "by_method":
    return config.pixel_scaling
  return "unit_interval" if config.method == "deep_ensemble" else "standardise"


def _subset(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  if size == 0 or size >= len(y):
    return x, y
  keep = np.sort(np.random.default_rng(seed).permutation(len(y))[:size])
  return x[keep], y[keep]


TRACE_STAGES_FILENAME = "stage_elbo_aux.csv"


def write_refinement_trace(output_dir: str, refinement: RefinementResult, steps_per_auxiliary: int,
                           title: str) -> None:
  """Figure 4's data and plot: the per-step minibatch ELBO_aux estimate of every member (CSV), the
  whole-training-set ELBO_aux after every stage if measured (CSV; stage 0 is the VI model), and the plot."""
  trace = refinement.trace
  steps = np.arange(1, len(trace) + 1)
  auxiliary = (steps - 1) // max(steps_per_auxiliary, 1) + 1
  columns = {"step": steps, "auxiliary_variable": auxiliary, "elbo_aux_mean": trace.mean(axis=1)}
  columns.update({f"member_{m}": trace[:, m] for m in range(trace.shape[1])})
  write_csv_atomically(os.path.join(output_dir, TRACE_FILENAME), columns)
  stages = None
  if refinement.stage_elbo_aux is not None:
    stages = np.concatenate([refinement.initial_elbo[None], refinement.stage_elbo_aux])
    stage_columns = {"auxiliary_variable": np.arange(len(stages)), "step": np.arange(len(stages)) * steps_per_auxiliary,
                     "elbo_aux_mean": stages.mean(axis=1), "elbo_aux_std": stages.std(axis=1)}
    stage_columns.update({f"member_{m}": stages[:, m] for m in range(stages.shape[1])})
    write_csv_atomically(os.path.join(output_dir, TRACE_STAGES_FILENAME), stage_columns)
  plot_elbo_aux_staircase(trace, steps_per_auxiliary, refinement.initial_elbo_estimate,
                          refinement.elbo_aux_estimate, title, os.path.join(output_dir, FIGURE_FILENAME),
                          stage_means=None if stages is None else stages.mean(axis=1))


def run_method(config: ImageConfig, data: images.ImageData,
               output_dir: str) -> tuple[dict, dict, Optional[RefinementResult]]:
  """Trains and evaluates one method; returns (metrics, timings, the refinement of refined_vi)."""
  x, y = data.x_train, data.y_train
  test_batches = images.input_pipeline(data.x_test, data.y_test, config.eval_batch_size)
  num_classes = images.NUM_CLASSES
  if config.method in VI_FAMILY:
    run = run_vi_family(
        config.method, config,
        lambda members: lenet.mean_field_lenet5(members, num_classes, config.empirical_bayes_prior,
                                                config.initial_untransformed_posterior_scale),
        x, y, categorical_log_likelihood, output_dir)
    metrics, timings, refinement = run.metrics, run.timings, run.refinement
    sample_logits = run.sample_outputs
  elif config.method == "mnf":
    refinement = None
    model = lenet.mnf_lenet5(config.seed, num_classes)
    training = mnf.train_mnf(model, x, y, categorical_log_likelihood, num_steps=config.mnf_steps,
                             learning_rate=config.learning_rate, batch_size=config.batch_size, seed=config.seed,
                             checkpoint_dir=os.path.join(output_dir, "checkpoints", "mnf"),
                             summary_dir=os.path.join(output_dir, "summaries", "mnf"),
                             steps_per_checkpoint=config.steps_per_checkpoint)
    metrics, timings = {}, {"train_seconds": training.train_seconds}

    def sample_logits(inputs):
      return posterior_draws(model, inputs, config.num_samples)
  else:
    refinement = None
    model = lenet.ensemble_lenet5(config.ensemble_members, config.seed, num_classes,
                                  config.ensemble_kernel_initializer)
    training = deep_ensemble.train_deep_ensemble(
        model, x, y, categorical_log_likelihood, num_members=config.ensemble_members,
        num_steps=config.ensemble_steps, learning_rate=config.learning_rate, batch_size=config.batch_size,
        epsilon=0.0, seed=config.seed, checkpoint_dir=os.path.join(output_dir, "checkpoints", "deep_ensemble"),
        summary_dir=os.path.join(output_dir, "summaries", "deep_ensemble"),
        steps_per_checkpoint=config.steps_per_checkpoint)
    metrics, timings = {}, {"train_seconds": training.train_seconds}
    sample_logits = model
  started = time.perf_counter()
  member_log_probabilities = predict_member_log_probabilities(sample_logits, test_batches)
  metrics.update(classification_metrics(predictive_log_probabilities(member_log_probabilities).numpy(), data.y_test))
  metrics.update(member_metrics(member_log_probabilities, data.y_test))
  timings["evaluate_seconds"] = time.perf_counter() - started
  return metrics, timings, refinement


def train_and_evaluate(config: ImageConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` and returns its metrics."""
  config.check()
  config = dataclasses.replace(config, pixel_scaling=pixel_scaling_of(config))
  started = time.perf_counter()
  seed_everything(config.seed)
  data = images.load(config.dataset, config.data_dir, config.download, config.source,
                     pixel_scaling=config.pixel_scaling)
  data.x_train, data.y_train = _subset(data.x_train, data.y_train, config.num_train_examples, config.seed)
  data.x_test, data.y_test = _subset(data.x_test, data.y_test, config.num_test_examples, config.seed)
  metrics, timings, refinement = run_method(config, data, output_dir)
  metrics.update(num_train=len(data.y_train), num_test=len(data.y_test),
                 peak_memory_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
  check_finite("metrics", metrics)   # a failed run writes nothing: checked before the trace files
  if refinement is not None:
    write_refinement_trace(output_dir, refinement, config.steps_per_auxiliary,
                           f"LeNet-5 / {config.dataset}, seed {config.seed}")
  timings["total_seconds"] = time.perf_counter() - started
  write_results(output_dir, benchmark="image", dataset=config.dataset, method=config.method, seed=config.seed,
                flags=dataclasses.asdict(config), metrics=metrics, timings=timings)
  return metrics


_FIELDS = [field.name for field in dataclasses.fields(ImageConfig)]


def define_flags() -> None:
  """The binary's flags (defined on demand, so that tests can import this module beside others)."""
  flags.DEFINE_string("output_dir", None, "Where results.json, the trace, checkpoints and summaries go.")
  flags.DEFINE_enum("dataset", "mnist", list(images.DATASETS), "Image dataset.")
  flags.DEFINE_enum("method", "refined_vi", list(METHODS), "Method to train and evaluate.")
  flags.DEFINE_enum("source", "files", list(images.SOURCES), "Original files (local directory, cache or "
                    "checksummed download) or tensorflow_datasets.")
  flags.DEFINE_string("data_dir", images.default_data_dir(), "Local data directory (<dir>/<dataset>/...); "
                      "default $REFINED_VI_DATA_DIR. Missing files are downloaded and checksummed.")
  flags.DEFINE_string("vi_checkpoint_dir", None, "Shared VI checkpoint directory (default under output_dir).")
  flags.DEFINE_enum("pixel_scaling", "by_method", list(PIXEL_SCALINGS),
                    "standardise: per channel with training statistics (the authors' VI code); unit_interval: "
                    "[0, 1] pixels (uncertainty-baselines' deterministic LeNet-5, whose ensemble the paper "
                    "reports); by_method: unit_interval for deep_ensemble, standardise otherwise.")
  flags.DEFINE_enum("ensemble_kernel_initializer", "glorot_uniform", list(lenet.ENSEMBLE_KERNEL_INITIALIZERS),
                    "deep_ensemble: initialiser of the ReLU layers' kernels (glorot_uniform: the Keras "
                    "default uncertainty-baselines uses; he_normal: as the suite's other LeNet-5s).")
  cli.define_config_flags(ImageConfig, exclude=("dataset", "method", "source", "data_dir", "vi_checkpoint_dir",
                                                "pixel_scaling", "ensemble_kernel_initializer"))


def main(argv):
  del argv
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  config = ImageConfig(**cli.flag_values(_FIELDS))
  metrics = train_and_evaluate(config, flags.FLAGS.output_dir)
  for name in ("test_mll", "test_accuracy", "elbo", "elbo_aux"):
    if name in metrics:
      print(f"{name}: {metrics[name]:.4f}")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
