"""LeNet-5 image classification (paper Table 2, Figure 4): one dataset, method and seed per run.

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

import resource
import time

import numpy as np

from common import cli, images
from image.config import ImageConfig


def subset(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """`size` examples drawn without replacement from the seed, in their original order (0: all)."""
  if size == 0 or size >= len(y):
    return x, y
  keep = np.sort(np.random.default_rng(seed).permutation(len(y))[:size])
  return x[keep], y[keep]


def train_and_evaluate(config: ImageConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` (and Figure 4) and returns its metrics."""
  # TensorFlow loads here, after the flags have been checked.
  from auxiliary_sampling.predictive import categorical_log_likelihood
  from baselines.methods import train_method, write_method_results
  from common.classification_metrics import (classification_metrics, member_metrics,
                                             predict_member_log_probabilities,
                                             predictive_log_probabilities)
  from common.results import check_finite
  from common.seeding import seed_everything
  from image.figures import write_refinement_trace
  from image.lenet import lenet5_networks

  config.validate()
  started = time.perf_counter()
  seed_everything(config.seed)
  data = images.load(config.dataset, config.resolved_data_dir, config.download, config.source,
                     pixel_scaling=config.pixel_scaling)
  x_train, y_train = subset(data.x_train, data.y_train, config.num_train_examples, config.seed)
  x_test, y_test = subset(data.x_test, data.y_test, config.num_test_examples, config.seed)
  run = train_method(config, lenet5_networks(config, images.NUM_CLASSES), x_train, y_train,
                     categorical_log_likelihood, output_dir)
  evaluation_started = time.perf_counter()
  member_log_probabilities = predict_member_log_probabilities(
      run.sample_outputs, images.input_pipeline(x_test, y_test, config.eval_batch_size))
  metrics = dict(run.metrics)
  metrics.update(
      classification_metrics(
          predictive_log_probabilities(member_log_probabilities).numpy(), y_test))
  metrics.update(member_metrics(member_log_probabilities, y_test))
  metrics.update(num_train=len(y_train), num_test=len(y_test),
                 peak_memory_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
  timings = dict(run.timings, evaluate_seconds=time.perf_counter() - evaluation_started)
  check_finite("metrics", metrics)   # a failed run writes nothing: checked before the trace files
  if run.refinement is not None:
    write_refinement_trace(output_dir, run.refinement, config.steps_per_auxiliary,
                           f"LeNet-5 / {config.dataset}, seed {config.seed}")
  timings["total_seconds"] = time.perf_counter() - started
  write_method_results(output_dir, "image", config, metrics, timings)
  return metrics


if __name__ == "__main__":
  cli.main(ImageConfig, train_and_evaluate,
           printed_metrics=("test_mll", "test_accuracy", "elbo", "elbo_aux"))
