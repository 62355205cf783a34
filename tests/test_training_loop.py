"""auxiliary_sampling.training_loop: what the loop hands its public hooks."""
import numpy as np
import tensorflow as tf

from auxiliary_sampling.training_batches import GroupedBatches, UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop


class _NoObjective(tf.Module):
  """An objective whose terms are nothing: the update below only looks at the batch."""

  def __init__(self):
    super().__init__()
    self.model = tf.Module()

  def terms(self, batch):
    return tf.zeros(tf.shape(batch.labels)[:-2]), tf.zeros([])


class _RowsSeen(tf.Module):
  """An update that moves nothing and records the mean label of its batch and N."""

  def __init__(self):
    super().__init__()
    self.optimizer = tf.Module()

  def reset(self):
    pass

  def step(self, objective, batch, learning_rate):
    del objective, learning_rate
    return tf.reduce_mean(batch.labels[..., 0], axis=-1), batch.num_examples


def test_an_update_sees_the_rows_its_batch_source_drew_for_each_step():
  """Step c takes the rows the batch source draws from the stateless seed (data seed, c), its
  inputs and labels gathered alike, and N. Catches a loop that hands an update other rows
  than its indices name (labels and inputs gathered apart), a counter that does not advance
  per step, and N not passed on."""
  num_examples, batch_size, data_seed = 50, 8, 7
  labels = np.arange(num_examples, dtype=np.float32)[:, None]
  batches = UniformBatches(labels * 2.0, labels, batch_size)
  loop = TrainingLoop(_NoObjective(), _RowsSeen(), batches, data_seed=data_seed)
  trace, seen_n = loop.maximize(5, 0.0, return_kl=True)
  for count in range(1, 6):
    indices = batches.example_indices(tf.constant([data_seed, count], tf.int64),
                                      tf.constant(count, tf.int64), None)
    assert trace[count - 1] == np.mean(labels[indices.numpy(), 0])
  np.testing.assert_array_equal(seen_n, num_examples)


def test_grouped_members_see_only_their_groups_filled_rows_and_share_by_group():
  """With `shared_by_group`, the members of a group see one batch of their group's first N rows
  (N the variable, read at every call); without it each member draws its own."""
  groups, capacity, members = 2, 30, 4
  labels = np.zeros([groups, capacity, 1], np.float32)
  labels[1] = 100.0
  labels[:, :, 0] += np.arange(capacity)
  count = tf.Variable(10, dtype=tf.int64)
  for shared in (True, False):
    batches = GroupedBatches(tf.Variable(labels), tf.Variable(labels), 6, members,
                             num_examples=count, shared_by_group=shared)
    loop = TrainingLoop(_NoObjective(), _RowsSeen(), batches, data_seed=1)
    trace = loop.maximize(20, 0.0)
    assert np.all(trace[:, :2] < 10) and np.all((trace[:, 2:] >= 100) & (trace[:, 2:] < 110))
    same_batch = np.all(trace[:, 0] == trace[:, 1]) and np.all(trace[:, 2] == trace[:, 3])
    assert same_batch == shared
  count.assign(30)
  assert np.max(loop.maximize(50, 0.0)[:, :2]) >= 10
