"""auxiliary_sampling.training_loop: what the loop hands its public hooks, and its progress
reports."""
import numpy as np
import pytest
import tensorflow as tf

from auxiliary_sampling import training_loop
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.training_batches import GroupedBatches, UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop
from tests.test_loop_settings import _loop


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


class _FakeClock:
  """Wall time that passes only when the loop runs: `seconds_per_step` per step."""

  def __init__(self, loop: TrainingLoop, seconds_per_step: float):
    self.now, self.calls = 0.0, []
    real_run = loop.run

    def timed_run(num_steps, learning_rate, elbo_offset):
      self.calls.append(int(num_steps))
      self.now += seconds_per_step * int(num_steps)
      return real_run(num_steps, learning_rate, elbo_offset)
    loop.run = timed_run

  def perf_counter(self) -> float:
    return self.now


@pytest.mark.parametrize("chunk", [0, 4])
def test_progress_reports_about_every_interval_between_whole_pieces(chunk, monkeypatch):
  """At 0.5 s a step, a 200-step call reports every 30 s: after steps 60, 120 and 180 (not after
  the last, whose line is the caller's), each call of the compiled loop a whole number of
  pieces (chunks of drawn-ahead noise). Catches reports tied to the call's end only (none
  inside), pieces that ignore the pace (a report per piece or none), and calls cut inside a
  chunk."""
  loop = _loop(LoopSettings(noise_chunk_steps=chunk))
  clock = _FakeClock(loop, 0.5)
  monkeypatch.setattr(training_loop, "time", clock)
  reports = []
  loop.maximize(200, 1e-2, progress=lambda done, trace: reports.append((done, len(trace))))
  assert reports == [(60, 60), (120, 120), (180, 180)]
  assert sum(clock.calls) == 200 and len(clock.calls) < 10
  assert all(steps % max(chunk, 1) == 0 for steps in clock.calls[:-1])


@pytest.mark.parametrize("chunk", [0, 4])
def test_a_loop_reporting_progress_gives_the_same_numbers_bit_for_bit(chunk):
  """Reporting after every piece (an interval of 0 s: 23 steps in calls of one step, or of one
  4-step chunk and a partial last one) leaves the trace, the KL trace and every variable as one
  call leaves them. Catches pieces that draw other numbers than one call (planted: pieces of one
  step under 4-step chunks, each drawing a whole chunk for one step; fails). Both runs start
  from the same fresh state: one loop, every variable its steps change set back to its initial
  value before each (one trace of the loop, not two)."""
  loop = _loop(LoopSettings(noise_chunk_steps=chunk))
  initial = [variable.numpy() for variable in loop.variables]
  results = []
  for progress in (None, lambda done, trace: reported.append(done)):
    reported = []
    for variable, value in zip(loop.variables, initial):
      variable.assign(value)
    trace, kl_trace = loop.maximize(23, 1e-2, return_kl=True, progress=progress,
                                    progress_seconds=0.0)
    results.append([trace, kl_trace, *(v.numpy() for v in loop.objective.model.variables)])
  assert reported == list(range(max(chunk, 1), 23, max(chunk, 1)))
  for one_call, in_pieces in zip(*results):
    np.testing.assert_array_equal(in_pieces, one_call)


def test_checkpointed_training_logs_inside_a_chunk_longer_than_the_interval(monkeypatch):
  """With a checkpoint interval beyond the run, lines come every 30 s of the loop (after 60, 120
  and 180 steps at 0.5 s a step) and at the chunk's end. Catches CheckpointedTraining not
  handing the loop its progress hook (planted: `progress=report` removed; only the end's line)."""
  from auxiliary_sampling import progress as progress_module
  from methods.trainers.training import CheckpointedTraining
  lines = []
  monkeypatch.setattr(progress_module.logging, "info", lines.append)
  loop = _loop(LoopSettings())
  monkeypatch.setattr(training_loop, "time", _FakeClock(loop, 0.5))
  CheckpointedTraining(loop, 1e-2, steps_per_checkpoint=10_000).train(200)
  assert [line.split(" (")[0] for line in lines] == [
      f"training: step {step}/200" for step in (60, 120, 180, 200)]
