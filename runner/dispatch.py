"""One dispatch from a method name to a trained predictive, for every benchmark.

A benchmark supplies its networks (`Networks`), its training data, its
log-likelihood and an output directory; `train_method` finds the run's method in
`methods.registry`, checks that the benchmark supplies what it needs, and trains
it (resuming from checkpoints made with the same settings). It returns the M
samples the method predicts with, the metrics gathered while training and the
timings; the benchmark evaluates the samples with its own metrics.
"""
from __future__ import annotations

import os
from typing import Optional

from auxiliary_sampling.training_data import LogLikelihoodFn
from auxiliary_sampling.training_loop import InputTransform
from runner.checkpoint_settings import claim_checkpoint_dir
from runner.config import MethodConfig
from common.config import absent_values
from common.distribution import writes_run_files
from common.results import RESULTS_FILENAME, write_results
from methods import registry
from methods.registry import REFINEMENT, VI, VOGN, MethodRun, Networks, TrainingInputs

__all__ = ["checkpoint_dir_of", "train_method", "write_method_results"]


def checkpoint_dir_of(config: MethodConfig, trainer: str, output_dir: str) -> str:
  """Where a trainer's checkpoints go; claimed for the run's settings (see checkpoint_settings)."""
  if trainer == VI and config.vi_checkpoint_dir:
    directory = config.vi_checkpoint_dir
  elif trainer == VOGN and config.vi_checkpoint_dir:
    directory = os.path.join(config.vi_checkpoint_dir, VOGN)
  else:
    directory = os.path.join(output_dir, "checkpoints", trainer)
  # A refinement starts from VI's (or VOGN's) state and is shaped by its own settings too.
  identity = config.identity(None if trainer == REFINEMENT else trainer)
  claim_checkpoint_dir(directory, identity, config.replace_mismatched,
                       absent_values(config))
  return directory


def train_method(config: MethodConfig, networks: Networks, inputs, labels,
                 log_likelihood_fn: LogLikelihoodFn, output_dir: str,
                 input_transform: Optional[InputTransform] = None) -> MethodRun:
  """Trains `config.method` on (inputs, labels) and returns its predictive samples.

  `input_transform` augments every training batch (of the methods that take one).
  """
  method = registry.method(config.method)
  missing = [kind for kind in method.needs if kind not in networks.kinds()]
  if missing:
    raise ValueError(f"{method.name} needs the benchmark's {', '.join(missing)} networks; it "
                     f"supplies: {', '.join(networks.kinds()) or 'none'}")
  if input_transform is not None and not method.takes_input_transform:
    raise ValueError(f"{method.name} takes no input transform")
  if networks.penalty is not None and not method.takes_penalty:
    raise ValueError(f"{method.name} takes no penalty of point-estimated weights")
  return method.train(TrainingInputs(
      config=config, networks=networks, inputs=inputs, labels=labels,
      log_likelihood_fn=log_likelihood_fn, output_dir=output_dir,
      checkpoint_dir=lambda trainer: checkpoint_dir_of(config, trainer, output_dir),
      input_transform=input_transform))


def write_method_results(output_dir: str, benchmark: str, config: MethodConfig, metrics: dict,
                         timings: dict) -> str:
  """results.json of one benchmark run: its dataset, method, seed and every setting (written by
  the chief of a --multi_worker run only; the path either way)."""
  if not writes_run_files():
    return os.path.join(output_dir, RESULTS_FILENAME)
  return write_results(output_dir, benchmark=benchmark, dataset=getattr(config, "dataset", None),
                       method=config.method, seed=config.seed, flags=config.as_dict(),
                       metrics=metrics, timings=timings)
