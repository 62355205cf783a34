"""In-memory training data and how a training step's minibatch is drawn from them.

A batch source holds the inputs and labels, says how many leading rows are the
data now (N of the objective), draws the example indices of any number of
steps from one stateless seed, and gathers a step's rows. `TrainingLoop` owns
the seeds and counters; a source only turns them into indices, so the same
seed always gives the same batches.
"""
from __future__ import annotations

from typing import Optional, Protocol

import tensorflow as tf

from auxiliary_sampling.training_data import check_data
from common.validation import check_integer


class BatchSource(Protocol):
  """What `TrainingLoop` asks of its data."""

  inputs: tf.Tensor | tf.Variable     # variables are read at every step (data that grow)
  labels: tf.Tensor | tf.Variable
  batch_size: int                     # rows per member and step, split over the replicas
  num_examples: int | tf.Variable     # N: the leading rows (of each group) that are the data now

  @property
  def batch_shape(self) -> list[int]:
    """One step's example indices: [batch_size], or [members, batch_size]."""

  def example_indices(self, seed: tf.Tensor, first_count: tf.Tensor,
                      num_steps: Optional[int]) -> tf.Tensor:
    """The indices of `num_steps` steps, [num_steps, *batch_shape] (None: of one step,
    [*batch_shape]), whose batch counters start at `first_count`, from the stateless `seed`."""

  def gather(self, data: tf.Tensor | tf.Variable, indices: tf.Tensor) -> tf.Tensor:
    """The rows `indices` of `data` (inputs or labels)."""


def plain_data(inputs, labels) -> tuple[tf.Tensor, tf.Tensor]:
  """Checked [N, ...] data: variables stay variables (read at every step), the rest become
  tensors."""
  if not (isinstance(inputs, tf.Variable) and isinstance(labels, tf.Variable)):
    inputs, labels = check_data(inputs, labels)
  if inputs.shape[0] != labels.shape[0]:
    raise ValueError(f"inputs have {inputs.shape[0]} examples but labels have {labels.shape[0]}")
  return inputs, labels


def uniform_indices(shape: list[int], seed: tf.Tensor, num_examples) -> tf.Tensor:
  """Indices of `shape` drawn uniformly with replacement from [0, N)."""
  return tf.random.stateless_uniform(shape, seed=seed, maxval=tf.cast(num_examples, tf.int64),
                                     dtype=tf.int64)


class UniformBatches:
  """Minibatches drawn uniformly with replacement from [N, ...] data: one batch shared by every
  member, or with `members=M` an independent batch per member (inputs [M, batch, ...], as
  deep-ensemble members need)."""

  def __init__(self, inputs, labels, batch_size: int, members: Optional[int] = None):
    self.inputs, self.labels = plain_data(inputs, labels)
    self.batch_size = check_integer("batch_size", batch_size)
    self.members = None if members is None else check_integer("members", members)
    self.num_examples = int(self.inputs.shape[0])

  @property
  def batch_shape(self) -> list[int]:
    return [self.batch_size] if self.members is None else [self.members, self.batch_size]

  def example_indices(self, seed, first_count, num_steps):
    del first_count
    shape = self.batch_shape if num_steps is None else [num_steps, *self.batch_shape]
    return uniform_indices(shape, seed, self.num_examples)

  def gather(self, data, indices):
    return tf.gather(data, indices)


class GroupedBatches:
  """Data that differ per member or grow (a bandit's histories): inputs and labels are
  [G, capacity, ...], member m of M trains on group m // (M / G), and `num_examples` (a scalar
  integer variable) says how many leading rows of each group are the data now. Each member draws
  its own batch; with `shared_by_group` the members of a group share one (a particle set)."""

  def __init__(self, inputs, labels, batch_size: int, members: int,
               num_examples: Optional[tf.Variable] = None, shared_by_group: bool = False):
    if not (isinstance(inputs, tf.Variable) and isinstance(labels, tf.Variable)):
      inputs, labels = check_data(inputs, labels)
    self.members = check_integer("members", members)
    if inputs.shape.rank < 2 or inputs.shape[:2] != labels.shape[:2]:
      raise ValueError(f"grouped data are [groups, capacity, ...]: got inputs {inputs.shape} "
                       f"and labels {labels.shape}")
    self.num_groups = int(inputs.shape[0])
    if self.members % self.num_groups:
      raise ValueError(f"{self.members} members do not split evenly over "
                       f"{self.num_groups} data groups")
    self.inputs, self.labels = inputs, labels
    self.batch_size = check_integer("batch_size", batch_size)
    self.members_per_group = self.members // self.num_groups
    self.num_examples = int(inputs.shape[1]) if num_examples is None else num_examples
    self.shared_by_group = shared_by_group

  @property
  def batch_shape(self) -> list[int]:
    return [self.members, self.batch_size]

  def example_indices(self, seed, first_count, num_steps):
    del first_count
    steps = [] if num_steps is None else [num_steps]
    if not self.shared_by_group:
      return uniform_indices([*steps, *self.batch_shape], seed, self.num_examples)
    indices = uniform_indices([*steps, self.num_groups, self.batch_size], seed,
                              self.num_examples)
    return tf.repeat(indices, self.members_per_group, axis=-2)

  def gather(self, data, indices):
    groups = tf.range(self.members, dtype=tf.int64) // self.members_per_group
    groups = tf.broadcast_to(groups[:, tf.newaxis], tf.shape(indices))
    return tf.gather_nd(data, tf.stack([groups, indices], axis=-1))
