"""Batch normalisation with an optional member axis: each member normalises with its own statistics.

Refinement and deep ensembles stack M networks on a leading member axis; a
batch-norm layer shared by the stack would mix the members' activations in
its batch statistics. `MemberBatchNormalization` keeps a scale, an offset and
moving statistics per member and normalises [M, B, H, W, C] over (B, H, W)
member by member, exactly as M separate layers would. Under a
`tf.distribute` strategy the batch statistics are those of the global batch.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras

from auxiliary_sampling.graph_loops import no_autograph
from common.validation import check_integer


class MemberBatchNormalization(tf_keras.layers.Layer):
  """Batch norm over the channels (last axis), per member (Ioffe & Szegedy 2015).

  Inputs [M?, B, ..., C] (a member axis only with `num_members`). In training
  the batch's moments normalise and update the moving averages
  (x_moving <- momentum * x_moving + (1 - momentum) * x_batch); in inference
  the moving averages normalise. Keras's defaults: momentum 0.99, epsilon 1e-3,
  and the moving variance averages the unbiased batch variance.
  """

  def __init__(self, num_members: Optional[int] = None, momentum: float = 0.99,
               epsilon: float = 1e-3, **kwargs):
    super().__init__(**kwargs)
    self.num_members = None if num_members is None else check_integer("num_members", num_members)
    if not 0 <= momentum < 1 or not epsilon > 0:
      raise ValueError(f"momentum={momentum} must be in [0, 1) and epsilon={epsilon} > 0")
    self.momentum, self.epsilon = float(momentum), float(epsilon)

  def build(self, input_shape):
    shape = [int(input_shape[-1])]
    if self.num_members is not None:
      shape = [self.num_members] + shape
    self.gamma = self.add_weight(name="gamma", shape=shape, initializer="ones")
    self.beta = self.add_weight(name="beta", shape=shape, initializer="zeros")
    # Replicas average their statistics when read (as Keras's batch norm does).
    moving = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                  aggregation=tf.VariableAggregation.MEAN)
    self.moving_mean = self.add_weight(name="moving_mean", shape=shape, initializer="zeros",
                                       **moving)
    self.moving_variance = self.add_weight(name="moving_variance", shape=shape,
                                           initializer="ones", **moving)
    super().build(input_shape)

  def _per_member(self, values: tf.Tensor, rank: int) -> tf.Tensor:
    """[M?, C] -> broadcastable against [M?, B, ..., C] inputs of `rank`."""
    leading = 0 if self.num_members is None else 1
    return tf.reshape(values, tf.concat([tf.shape(values)[:leading],
                                         tf.ones([rank - leading - 1], tf.int32),
                                         tf.shape(values)[-1:]], 0))

  @staticmethod
  def _batch_moments(inputs: tf.Tensor, axes: list[int]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Mean, (biased) variance and count over `axes` of the global batch.

    Under data parallelism the replicas' sums are all-reduced (synchronised
    batch norm), so R replicas normalise exactly as one device does.
    """
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), tf.float32)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
      mean, variance = tf.nn.moments(inputs, axes)
      return mean, variance, count
    total, squares, count = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [tf.reduce_sum(inputs, axes), tf.reduce_sum(tf.square(inputs), axes), count])
    mean = total / count
    return mean, tf.maximum(squares / count - tf.square(mean), 0.0), count

  @no_autograph
  def call(self, inputs, training=None):
    inputs = tf.convert_to_tensor(inputs, self.compute_dtype)
    rank = inputs.shape.rank
    if self.num_members is not None and inputs.shape[0] != self.num_members:
      raise ValueError(f"{self.name}: expected a member axis of {self.num_members}, got inputs "
                       f"of shape {inputs.shape}")
    if training:
      axes = list(range(0 if self.num_members is None else 1, rank - 1))
      mean, variance, count = self._batch_moments(tf.cast(inputs, tf.float32), axes)
      # The moving variance is the unbiased estimate, as in Keras's (fused) batch norm.
      unbiased = variance * count / tf.maximum(count - 1.0, 1.0)
      for moving, batch_value in ((self.moving_mean, mean), (self.moving_variance, unbiased)):
        moving.assign(self.momentum * moving + (1.0 - self.momentum) * batch_value)
    else:
      mean = tf.cast(self.moving_mean, tf.float32)
      variance = tf.cast(self.moving_variance, tf.float32)
    # In float32 whatever the compute dtype (a bfloat16 network reads its variables in bfloat16).
    scale = tf.cast(self.gamma, tf.float32) * tf.math.rsqrt(variance + self.epsilon)
    offset = tf.cast(self.beta, tf.float32) - mean * scale
    return (inputs * tf.cast(self._per_member(scale, rank), inputs.dtype)
            + tf.cast(self._per_member(offset, rank), inputs.dtype))
