"""Which rows of the global minibatch this replica holds, so per-example noise splits exactly.

Under data parallelism (a `TrainingLoop` under a `tf.distribute` strategy with
R replicas) each replica computes B / R examples of the global batch of B.
Per-example random numbers (local reparameterisation, Flipout signs, MNF's z)
are drawn for the whole global batch from the one counter-based stream every
replica shares, and each replica keeps its own rows. So replica r's examples
get exactly the numbers they would get on one device, and R replicas train
exactly as one device does, up to the round-off of summing in another order.

The `TrainingLoop` enters `batch_shard` inside each replica's step; noise draws
call `global_rows` for the shape to draw and `local_rows` for the rows to
keep. Outside any shard (one device, evaluation) both are the identity. The
shard is context, not an argument, because the draws are made inside the
layers' `call`s (Keras containers pass them only `training` and `mask`), and
context-local, because replicas trace their steps in separate threads.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

import tensorflow as tf

# (number of shards, this shard's index), or None on one device.
_current_shard: contextvars.ContextVar[Optional[tuple[int, tf.Tensor]]]
_current_shard = contextvars.ContextVar("batch_shard", default=None)


@contextlib.contextmanager
def batch_shard(num_shards: int, shard_index) -> Iterator[None]:
  """Inside the block the batch is shard `shard_index` (an int or a tensor) of `num_shards`."""
  if num_shards < 1:
    raise ValueError(f"num_shards={num_shards} must be >= 1")
  token = _current_shard.set(
      None if num_shards == 1 else (num_shards, tf.cast(shard_index, tf.int32)))
  try:
    yield
  finally:
    _current_shard.reset(token)


def shard_count() -> int:
  """The number of shards the batch is split into here (1 outside any)."""
  shard = _current_shard.get()
  return 1 if shard is None else shard[0]


def global_rows(shape) -> tf.Tensor:
  """The shape to draw: `shape` (local batch first) with the batch axis scaled to the global one."""
  shape = tf.cast(shape, tf.int32)
  shard = _current_shard.get()
  if shard is None:
    return shape
  num_shards, _ = shard
  return tf.concat([shape[:1] * num_shards, shape[1:]], 0)


def local_rows(draws: tf.Tensor, batch_axis: int, local_shape) -> tf.Tensor:
  """This shard's rows, along `batch_axis`, of draws made for the global batch.

  `local_shape` is the shape asked for, the local batch first.
  """
  shard = _current_shard.get()
  if shard is None:
    return draws
  _, index = shard
  local_batch = tf.cast(local_shape, tf.int32)[0]
  begin = tf.concat([tf.zeros([batch_axis], tf.int32), [index * local_batch],
                     tf.zeros([draws.shape.rank - batch_axis - 1], tf.int32)], 0)
  size = tf.concat([tf.fill([batch_axis], -1), [local_batch],
                    tf.fill([draws.shape.rank - batch_axis - 1], -1)], 0)
  return tf.slice(draws, begin, size)
