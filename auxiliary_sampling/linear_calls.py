"""What the mean-field layers multiply, recorded for closed-form per-example gradients.

With one weight draw per batch (per_batch weight noise) a dense or
convolution layer computes z = x W + b for every example with the same W, so
example i's gradient of its own loss is x_i outer dL_i/dz_i (a sum of such
outer products over positions for a convolution), and dL/dz of the summed loss
holds every dL_i/dz_i at once. Inside `record_linear_calls()` the layers append
their inputs and pre-activations to a list; one backward pass to the
pre-activations then gives every per-example gradient (`per_example_gradients`)
without a loop or a vectorised Jacobian (Goodfellow 2015; the VOGN code of
Osawa et al. reads the same quantities with forward hooks).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Iterator, Optional

import tensorflow as tf

# The innermost recording's list. Context, not an argument: the layers record inside their
# `call`s, which Keras containers reach with `training` and `mask` only.
_recorded: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("linear_calls",
                                                                           default=None)


@dataclasses.dataclass
class LinearCall:
  """One layer call z = x W + b (dense) or z = conv(x, W) + b, without a member axis."""

  kernel: object            # the kernel's GaussianMeanField
  bias: Optional[object]    # the bias's GaussianMeanField, or None
  inputs: tf.Tensor         # x: [B, in] or [B, H, W, C]
  pre_activations: tf.Tensor  # z: [B, out] or [B, H', W', F]
  strides: int | tuple[int, int] = 1   # convolutions only
  padding: str = "VALID"    # convolutions only


@contextlib.contextmanager
def record_linear_calls() -> Iterator[list[LinearCall]]:
  """Collects the LinearCall of every per_batch dense or convolution call made in the block."""
  calls: list[LinearCall] = []
  token = _recorded.set(calls)
  try:
    yield calls
  finally:
    _recorded.reset(token)


def calls_producing(calls: list[LinearCall], outputs: tf.Tensor) -> list[LinearCall]:
  """The recorded calls that computed `outputs` (same graph, or eager like it).

  Keras may trace a layer's `call` once more in a scratch graph (to infer its output
  signature) while a recording is open; those symbolic calls are dropped here.
  """
  if tf.is_symbolic_tensor(outputs):
    return [c for c in calls if tf.is_symbolic_tensor(c.pre_activations)
            and c.pre_activations.graph is outputs.graph]
  return [c for c in calls if not tf.is_symbolic_tensor(c.pre_activations)]


def record(call: LinearCall) -> None:
  """Adds `call` to the innermost recording, if any (the layers call this)."""
  calls = _recorded.get()
  if calls is not None:
    calls.append(call)


def _input_rows(call: LinearCall) -> tf.Tensor:
  """x as [B, positions, fan_in]: one row per output position (its patch for a convolution)."""
  inputs = call.inputs
  if inputs.shape.rank == 2:
    return inputs[:, tf.newaxis, :]
  height, width = call.kernel.event_shape[:2]
  stride = (call.strides, call.strides) if isinstance(call.strides, int) else call.strides
  strides = [1, *stride, 1]
  patches = tf.image.extract_patches(inputs, [1, height, width, 1], strides, [1, 1, 1, 1],
                                     call.padding)
  return tf.reshape(patches, [tf.shape(inputs)[0], -1, patches.shape[-1]])


def per_example_gradients(call: LinearCall, pre_activation_gradients: tf.Tensor
                          ) -> list[tf.Tensor]:
  """[B, *shape] gradients of each example's loss w.r.t. the kernel (and bias) of `call`.

  `pre_activation_gradients`: dL/dz of a loss summed over examples, each example's
  term depending on its own z_i only.
  """
  rows = _input_rows(call)
  batch = tf.shape(rows)[0]
  deltas = tf.reshape(pre_activation_gradients, [batch, -1, pre_activation_gradients.shape[-1]])
  kernel = tf.einsum("bpi,bpo->bio", rows, deltas)
  gradients = [tf.reshape(kernel, tf.concat([[batch], call.kernel.event_shape], 0))]
  if call.bias is not None:
    gradients.append(tf.reduce_sum(deltas, axis=1))
  return gradients


def mean_and_mean_square(call: LinearCall, pre_activation_gradients: tf.Tensor
                         ) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
  """Means over the batch of the per-example gradients and of their squares, for the kernel
  (and bias) of `call`; a dense layer's come from two matmuls, with no [B, in, out] tensor."""
  if call.inputs.shape.rank != 2:
    gradients = per_example_gradients(call, pre_activation_gradients)
    return ([tf.reduce_mean(g, axis=0) for g in gradients],
            [tf.reduce_mean(tf.square(g), axis=0) for g in gradients])
  inputs, deltas = call.inputs, pre_activation_gradients
  batch = tf.cast(tf.shape(inputs)[0], inputs.dtype)
  means = [tf.matmul(inputs, deltas, transpose_a=True) / batch]
  squares = [tf.matmul(tf.square(inputs), tf.square(deltas), transpose_a=True) / batch]
  if call.bias is not None:
    means.append(tf.reduce_mean(deltas, axis=0))
    squares.append(tf.reduce_mean(tf.square(deltas), axis=0))
  return means, squares


def gauss_newton_mean(call: LinearCall, output_gradients: list[tf.Tensor],
                      output_curvatures: list[tf.Tensor]) -> list[tf.Tensor]:
  """Batch mean of sum_k c_ik (d f_ik / d W)^2 for the kernel (and bias) of `call`.

  `output_gradients[k]`: dz of the summed network output k; `output_curvatures[k]`: [B] second
  derivatives c_ik of each example's loss w.r.t. its output k. For a dense layer
  (x_i outer d_i)^2 = x_i^2 outer d_i^2, so the sum over k is taken before one matmul.
  """
  if call.inputs.shape.rank == 2:
    weighted = tf.add_n([c[:, tf.newaxis] * tf.square(d)
                         for d, c in zip(output_gradients, output_curvatures)])
    batch = tf.cast(tf.shape(call.inputs)[0], call.inputs.dtype)
    means = [tf.matmul(tf.square(call.inputs), weighted, transpose_a=True) / batch]
    if call.bias is not None:
      means.append(tf.reduce_mean(weighted, axis=0))
    return means
  totals = None
  for d, c in zip(output_gradients, output_curvatures):
    terms = [tf.reduce_mean(tf.reshape(c, [-1] + [1] * (g.shape.rank - 1)) * tf.square(g), axis=0)
             for g in per_example_gradients(call, d)]
    totals = terms if totals is None else [t + u for t, u in zip(totals, terms)]
  return totals
