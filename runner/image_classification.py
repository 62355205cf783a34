"""One image-classification run end to end, for every image binary (LeNet-5, ResNet-20).

Loads the dataset, trains the configured method on the binary's networks
(`runner.dispatch.train_method`), scores the M samples on the test set (MLL,
accuracy, Brier, ECE, per-member metrics), writes refined VI's ELBO_aux trace
and Figure 4, and records everything in results.json.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Callable

import numpy as np

from auxiliary_sampling.predictive import categorical_log_likelihood
from runner.classification_metrics import (classification_metrics, label_log_probabilities,
                                           member_metrics, predict_member_log_probabilities,
                                           predictive_log_probabilities)
from runner.dispatch import Networks, train_method, write_method_results
from runner.image_augmentation import RandomImageTransform
from runner.image_config import ImageClassificationConfig
from runner.refinement_figures import write_refinement_trace
from common import images
from common.distribution import writes_run_files
from common.results import TEST_LOG_PREDICTIVE_FILENAME, atomic_output, check_finite
from common.seeding import seed_everything


def subset(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """`size` examples drawn without replacement from the seed, in their original order (0: all)."""
  if size == 0 or size >= len(y):
    return x, y
  keep = np.sort(np.random.default_rng(seed).permutation(len(y))[:size])
  return x[keep], y[keep]


def train_and_evaluate_images(config: ImageClassificationConfig,
                              networks_fn: Callable[[ImageClassificationConfig, int], Networks],
                              output_dir: str, benchmark: str, model_name: str) -> dict:
  """Trains and scores `config.method` with `networks_fn(config, num_classes)`; writes
  `output_dir/results.json` (and Figure 4 for refined VI) and returns the metrics."""
  config.validate()
  started = time.perf_counter()
  seed_everything(config.seed)
  data = images.load(config.dataset, config.resolved_data_dir, config.download, config.source,
                     pixel_scaling=config.pixel_scaling)
  x_train, y_train = subset(data.x_train, data.y_train, config.num_train_examples, config.seed)
  x_test, y_test = subset(data.x_test, data.y_test, config.num_test_examples, config.seed)
  input_transform = RandomImageTransform() if config.data_augmentation else None
  run = train_method(config, networks_fn(config, images.NUM_CLASSES), x_train, y_train,
                     categorical_log_likelihood, output_dir, input_transform=input_transform)
  evaluation_started = time.perf_counter()
  member_log_probabilities = predict_member_log_probabilities(
      run.sample_outputs, images.input_pipeline(x_test, y_test, config.eval_batch_size))
  metrics = dict(run.metrics)
  predictive = predictive_log_probabilities(member_log_probabilities).numpy()
  metrics.update(classification_metrics(predictive, y_test))
  metrics.update(member_metrics(member_log_probabilities, y_test))
  metrics.update(num_train=len(y_train), num_test=len(y_test),
                 peak_memory_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
  timings = dict(run.timings, evaluate_seconds=time.perf_counter() - evaluation_started)
  check_finite("metrics", metrics)   # a failed run writes nothing: checked before the trace files
  if writes_run_files():   # before results.json, which marks the run finished
    with atomic_output(os.path.join(output_dir, TEST_LOG_PREDICTIVE_FILENAME)) as path:
      with open(path, "wb") as stream:
        np.save(stream, label_log_probabilities(predictive, y_test).astype(np.float32))
  if run.refinement is not None and writes_run_files():
    write_refinement_trace(output_dir, run.refinement, config.steps_per_auxiliary,
                           f"{model_name} / {config.dataset}, seed {config.seed}")
  timings["total_seconds"] = time.perf_counter() - started
  write_method_results(output_dir, benchmark, config, metrics, timings)
  return metrics
