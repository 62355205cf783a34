"""Predictive marginal log-likelihood over posterior samples.

MLL = mean over test points of log (1/M) sum_m p(y | x, w_m), a log-mean-exp
over the member axis (the paper's test MLL, Section 4).
"""
from __future__ import annotations

import math

import tensorflow as tf

from auxiliary_sampling.graph_loops import counted_loop


def posterior_draws(model, inputs, num_draws: int) -> tf.Tensor:
  """[num_draws, batch, ...] outputs of a model without a member axis.

  Fresh weights in every call. In a traced function the draws are one loop, so that the network
  is traced once rather than once per draw (an evaluation's M = 10 LeNet-5 or ResNet-20 forward
  passes traced ten times); the draws and their order are the same either way.
  """
  if not tf.inside_function():
    return tf.stack([model(inputs) for _ in range(num_draws)])
  # A Keras network computes in (and returns) its compute dtype: bfloat16 under --use_bfloat16.
  dtype = tf.as_dtype(getattr(model, "compute_dtype", None) or tf.float32)

  def draw(index, outputs):
    return (outputs.write(index, tf.cast(model(inputs), dtype)),)
  return counted_loop(num_draws, draw, (tf.TensorArray(dtype, size=num_draws),))[0].stack()


def log_mean_exp(values: tf.Tensor, axis: int = 0) -> tf.Tensor:
  """log( mean( exp(values) ) ) along `axis`, computed stably."""
  values = tf.convert_to_tensor(values)
  count = tf.cast(tf.shape(values)[axis], values.dtype)
  return tf.reduce_logsumexp(values, axis=axis) - tf.math.log(count)


def gaussian_log_likelihood(labels, loc, scale, target_shift=0.0, target_scale=1.0) -> tf.Tensor:
  """log N(y | loc, scale^2) in the original units of y.

  `loc` and `scale` are predictions for standardised targets; `labels` are in
  original units, y = target_shift + target_scale * y_standardised.
  """
  labels = tf.cast(labels, loc.dtype)
  original_loc = target_shift + target_scale * loc
  original_scale = target_scale * scale
  return (-0.5 * math.log(2.0 * math.pi) - tf.math.log(original_scale)
          - 0.5 * tf.square((labels - original_loc) / original_scale))


def to_float32_if_half(outputs: tf.Tensor) -> tf.Tensor:
  """A bfloat16 (or float16) network's outputs in float32, before any likelihood or softmax."""
  outputs = tf.convert_to_tensor(outputs)
  return tf.cast(outputs, tf.float32) if outputs.dtype in (tf.bfloat16, tf.float16) else outputs


def categorical_log_likelihood(labels, logits) -> tf.Tensor:
  """log Categorical(y | softmax(logits)) for integer labels, in float32 for bfloat16 logits."""
  logits = to_float32_if_half(logits)
  labels = tf.cast(labels, tf.int32)
  labels = tf.broadcast_to(labels, tf.shape(logits)[:-1])
  return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def predictive_log_likelihood(member_log_likelihoods) -> tf.Tensor:
  """Per-example log (1/M) sum_m p(y | x, w_m) from [M, batch] log-likelihoods."""
  return log_mean_exp(member_log_likelihoods, axis=0)


def marginal_log_likelihood(member_log_likelihoods) -> float:
  """The MLL metric: mean over examples of the predictive log-likelihood."""
  return float(tf.reduce_mean(predictive_log_likelihood(member_log_likelihoods)))
