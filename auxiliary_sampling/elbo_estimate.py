"""Whole-dataset ELBO estimates, one per member, as refinement reports them (paper Eqs. 4, 13)."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from auxiliary_sampling import progress
from auxiliary_sampling.graph_loops import counted_loop, graph_function
from auxiliary_sampling.model_parameters import model_kl
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.weight_noise import weight_noise_scope
from common.validation import check_integer


@dataclasses.dataclass(frozen=True)
class ElboTerms:
  """The two terms of a whole-dataset ELBO, one value per member (float64)."""

  expected_log_likelihood: np.ndarray   # sum_n E_q log p(y_n | x_n, w)
  kl: np.ndarray                        # KL(q || p(. | a_1..k)) of the model as it stands

  @property
  def elbo(self) -> np.ndarray:
    return self.expected_log_likelihood - self.kl


@dataclasses.dataclass(frozen=True)
class PartialEstimate:
  """How far a whole-dataset estimate has got: the loop's batches done (over samples and
  batches) and their summed log-likelihood, one value per member (float64)."""

  batches_done: int
  summed: np.ndarray


def estimate_elbo(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
                  batch_size: int = 1024, num_samples: int = 1,
                  description: str = "ELBO estimate") -> np.ndarray:
  """Whole-dataset ELBO, sum_n E_q log p(y_n | x_n, w) - KL, one value per member."""
  return estimate_elbo_terms(model, inputs, labels, log_likelihood_fn, batch_size,
                             num_samples, description).elbo


def estimate_elbo_terms(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
                        batch_size: int = 1024, num_samples: int = 1,
                        description: str = "ELBO estimate", *,
                        resume_from: Optional[PartialEstimate] = None,
                        after_piece: Optional[Callable[[PartialEstimate], None]] = None
                        ) -> ElboTerms:
  """The whole-dataset ELBO's expected log-likelihood and KL, one value per member.

  Apart, they say what a change of the ELBO is made of: a better fit of the
  data or a posterior closer to its prior (paper Eq. 4).

  The expected log-likelihood of every example is estimated with `num_samples`
  independent posterior draws (per_example weight noise: local
  reparameterisation draws per example), in a compiled loop over samples and
  batches. The model runs in inference mode (`training=False`): batch norm
  normalises with its moving statistics and leaves them as they are, so an
  estimate neither depends on the batching nor changes the model.

  The loop runs in pieces sized from the clock, each carrying the running sum
  into the next, so that an estimate over a large data set (ResNet-20 on 60,000
  images: minutes) logs its progress, as `description`, about every
  `progress.PROGRESS_SECONDS`; the pieces add the same numbers in the same order
  as one loop would, and draw the same noise (the stream's counter advances once
  per batch whatever the piece).

  A long estimate can be interrupted and resumed: `after_piece(partial)` is called
  after every piece but the last (a caller checkpoints the model's noise streams
  with it), and `resume_from` continues from such a partial sum, the model's noise
  streams standing where they stood then; the result is the uninterrupted
  estimate's bit for bit (tested).
  """
  num_samples = check_integer("num_samples", num_samples)
  inputs, labels = check_data(inputs, labels)
  num_batches = -(-int(inputs.shape[0]) // batch_size)
  total_batches = num_samples * num_batches
  summed = tf.zeros_like(model_kl(model), dtype=tf.float64)
  done, seconds_per_batch = 0, None
  if resume_from is not None:
    done = check_integer("resume_from.batches_done", resume_from.batches_done, minimum=0)
    if done >= total_batches or np.shape(resume_from.summed) != tuple(summed.shape):
      raise ValueError(f"cannot resume an estimate of {total_batches} batches and "
                       f"{summed.shape} members from {done} batches done and a sum of shape "
                       f"{np.shape(resume_from.summed)}")
    summed = tf.constant(resume_from.summed, tf.float64)
  summed_value = summed.numpy()
  log = progress.ProgressLog(description, total_batches, start_step=done)
  while done < total_batches:
    # The first piece is one batch (it traces); then pieces of about PROGRESS_SECONDS each.
    piece = 1 if seconds_per_batch is None else max(
        1, int(progress.PROGRESS_SECONDS / max(seconds_per_batch, 1e-9)))
    piece = min(piece, total_batches - done)
    started = time.perf_counter()
    summed = _summed_log_likelihood(model, inputs, labels, log_likelihood_fn, batch_size,
                                    tf.constant(done, tf.int32), tf.constant(piece, tf.int32),
                                    summed)
    summed_value = summed.numpy()   # waits for the piece, so the clock measures it
    seconds_per_batch = (time.perf_counter() - started) / piece
    done += piece
    if done < total_batches and log.due(progress.PROGRESS_SECONDS):
      log.log(done)
    if done < total_batches and after_piece is not None:
      after_piece(PartialEstimate(batches_done=done, summed=summed_value))
  if log.previous_step:   # a long estimate says when it ends too
    log.log(done)
  return ElboTerms(expected_log_likelihood=summed_value / num_samples,
                   kl=model_kl(model).numpy().astype(np.float64))


def trace_elbo_estimate(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
                        batch_size: int = 1024, num_samples: int = 1) -> None:
  """Traces what `estimate_elbo_terms` with these arguments runs, without running it (a pass
  over the data), so that the estimate then starts at once (`refine.Refiner.prepare`)."""
  check_integer("num_samples", num_samples)
  inputs, labels = check_data(inputs, labels)
  _summed_log_likelihood.get_concrete_function(
      model, inputs, labels, log_likelihood_fn, batch_size, tf.constant(0, tf.int32),
      tf.constant(1, tf.int32), tf.zeros_like(model_kl(model), dtype=tf.float64))


@graph_function(reduce_retracing=True)
def _summed_log_likelihood(model: tf.Module, inputs: tf.Tensor, labels: tf.Tensor,
                           log_likelihood_fn: LogLikelihoodFn, batch_size: int,
                           first: tf.Tensor, count: tf.Tensor, summed: tf.Tensor) -> tf.Tensor:
  """`summed` plus sum_n log p(y_n | x_n, w) of the loop's batches first .. first + count - 1
  (batch b: the data's batch b mod num_batches under the posterior draw its noise gives)."""
  num_examples = tf.shape(inputs)[0]
  num_batches = (num_examples + batch_size - 1) // batch_size

  def add_batch(index, total):
    start = ((first + index) % num_batches) * batch_size
    batch_labels = labels[start:start + batch_size]
    with weight_noise_scope("per_example"):
      outputs = model(inputs[start:start + batch_size], training=False)
    log_likelihood = log_likelihood_fn(batch_labels, outputs)
    return (total + tf.reduce_sum(tf.cast(log_likelihood, tf.float64), axis=-1),)
  return counted_loop(count, add_batch, (summed,))[0]
