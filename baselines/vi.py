"""Mean-field variational inference (Graves 2011; Blundell et al. 2015).

Maximises the ELBO over every trainable variable of a model built from
`auxiliary_sampling` layers: posterior locations and scales and the
empirical-Bayes prior scales (one per weight tensor), with KL divided by N and
Adam, in one compiled loop.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from auxiliary_sampling.objective import ElboMaximizer, LogLikelihoodFn, check_data


@dataclasses.dataclass
class TrainingResult:
  trace: np.ndarray        # [num_steps, M?] minibatch ELBO estimates (whole-dataset scale)
  train_seconds: float


def train_mean_field(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
                     num_steps: int = 30_000, learning_rate: float = 1e-3, batch_size: int = 256,
                     seed: int = 0) -> TrainingResult:
  """Trains `model` by maximising its ELBO for `num_steps` Adam steps (paper Section 4.1)."""
  if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
    raise ValueError(f"num_steps={num_steps!r} must be an integer >= 1")
  if not learning_rate > 0:
    raise ValueError(f"learning_rate={learning_rate!r} must be > 0")
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  maximizer = ElboMaximizer(model, inputs, labels, log_likelihood_fn, model.trainable_variables,
                            batch_size=batch_size, data_seed=seed)
  started = time.perf_counter()
  trace = maximizer.maximize(num_steps, learning_rate)
  return TrainingResult(trace=trace, train_seconds=time.perf_counter() - started)
