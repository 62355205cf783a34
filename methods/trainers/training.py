"""Long training runs: chunks of the compiled loop, checkpoints, resume, `tf.summary`.

Every baseline trains through a `TrainingLoop` (one compiled loop); this module
runs that loop in chunks of `steps_per_checkpoint` steps. After each chunk it
logs a progress line (and the loop logs one about every 30 s inside a long chunk) and
saves everything the next step depends on (model variables including the noise
streams' counters, Adam moments, the batch counter, the step, the accumulated
training seconds and the trace) and writes `tf.summary` scalars. A rerun
pointed at the same checkpoint directory continues from the last chunk and,
because every random stream is counter-based, reaches exactly the state an
uninterrupted run would have.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from auxiliary_sampling.graph_loops import counted_loop, graph_function
from auxiliary_sampling.progress import ProgressLog
from auxiliary_sampling.training_loop import TrainingLoop
from common.distribution import writes_run_files
from common.validation import check_integer
from methods.trainers.learning_rate import LearningRateSchedule

_TRACE_FILENAME = "trace.npz"

# model -> penalty of its point-estimated weights per training example (an L2 term as a Keras
# loss would add it); trainers subtract N times it from the objective.
Penalty = Callable[[tf.Module], tf.Tensor]


@dataclasses.dataclass
class TrainingResult:
  trace: np.ndarray  # [num_steps, M?] minibatch ELBO (or objective) estimates, whole-dataset scale
  kl_trace: np.ndarray     # [num_steps, M?] the KL term at every step
  train_seconds: float     # wall time of all steps, including those of resumed earlier runs
  resumed_from_step: int   # 0 for a fresh run
  # The first chunk's seconds in this call (a resumed run's earlier processes aside) beyond the
  # pace of its later chunks: tracing and compiling the loop (None without a later chunk as long).
  setup_seconds: Optional[float] = None


def _scalar_metadata() -> bytes:
  """What `tf.summary.scalar` marks its summaries with (the scalars plugin's name and its empty
  version-0 content), built from TensorFlow's own protos: `tf.summary.scalar` comes from the
  tensorboard package, whose import pulls in boto3 where that is installed (0.08 s of a 12 s
  Boston run on an idle machine here, ~0.35 s under load)."""
  return summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
  ).SerializeToString()


class _ScalarWriter:
  """`tf.summary` scalars of many steps written by one graph call: eager `tf.summary.scalar`
  calls cost ~0.3 ms each (45 ms per 5,000 Boston steps, 3 ms in one call). One per writer: a
  traced function keeps the writer it was traced with. TensorBoard reads them as scalars."""

  def __init__(self, directory: str):
    self.writer = tf.summary.create_file_writer(directory)
    self._metadata = _scalar_metadata()
    # Any number of rows, one trace.
    self._write_rows = graph_function(self._rows_in_graph, reduce_retracing=True)

  def _rows_in_graph(self, steps: tf.Tensor, values: dict[str, tf.Tensor]) -> None:
    with self.writer.as_default():
      def write_row(index):
        with tf.compat.v1.name_scope(None):   # tags without the loop's "while/" scope
          for tag, column in values.items():
            tf.summary.write(tag, column[index], step=steps[index], metadata=self._metadata)
        return ()
      counted_loop(tf.shape(steps)[0], write_row, ())

  def write(self, steps: np.ndarray, values: dict[str, np.ndarray]) -> None:
    """Writes values[tag][i] at steps[i] for every tag, and flushes."""
    self._write_rows(tf.constant(steps, tf.int64),
                     {tag: tf.constant(column, tf.float32) for tag, column in values.items()})
    self.writer.flush()

  def close(self) -> None:
    self.writer.close()


class CheckpointedTraining:
  """Trains with `loop` up to a step count, checkpointing and logging as it goes."""

  def __init__(self, loop: TrainingLoop, learning_rate: float | LearningRateSchedule, *,
               steps_per_checkpoint: int = 5000, summary_every: int = 100, name: str = "training",
               extra_state: Optional[dict[str, tf.Module]] = None,
               objective_name: str = "ELBO"):
    """`learning_rate`: a constant, or a schedule over the steps (chunks end at its boundaries).
    `extra_state`: further objects a step depends on (an objective's own random streams), saved
    under their names. `objective_name`: what the loop's trace is, in progress lines and
    as the summary tag (lower case, spaces as underscores)."""
    if not isinstance(learning_rate, LearningRateSchedule):
      if not learning_rate > 0:
        raise ValueError(f"learning_rate={learning_rate!r} must be > 0")
      learning_rate = LearningRateSchedule(float(learning_rate))
    if steps_per_checkpoint < 1 or summary_every < 1:
      raise ValueError(
          f"steps_per_checkpoint={steps_per_checkpoint} and summary_every={summary_every} "
          "must be >= 1")
    self.loop = loop
    self.name = name
    self.learning_rate = learning_rate
    self.steps_per_checkpoint = int(steps_per_checkpoint)
    self.summary_every = int(summary_every)
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    self.train_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="train_seconds")
    self.checkpoint = tf.train.Checkpoint(
        model=loop.objective.model, optimizer=loop.update.optimizer,
        batch_counter=loop.batch_counter, step=self.step, train_seconds=self.train_seconds,
        **(extra_state or {}))
    self.objective_name = objective_name
    self.traces: list[np.ndarray] = []
    self.kl_traces: list[np.ndarray] = []

  def _restore(self, checkpoint_dir: str, num_steps: int) -> None:
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest is None:
      return
    saved_step = int(tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE"))
    if saved_step > num_steps:
      raise ValueError(f"the checkpoint in {checkpoint_dir} is at step {saved_step}, beyond the "
                       f"requested {num_steps} steps: use a fresh checkpoint directory")
    if saved_step <= int(self.step.numpy()):
      return
    self.checkpoint.restore(latest).assert_existing_objects_matched()
    with np.load(os.path.join(checkpoint_dir, _TRACE_FILENAME)) as saved:
      self.traces, self.kl_traces = [saved["trace"]], [saved["kl_trace"]]

  def _save(self, checkpoint_dir: str) -> None:
    if not writes_run_files():
      # A --multi_worker run's other workers take part in the save (it may gather values over
      # the workers) into a folder of their own, which they delete; the chief's is the run's.
      with tempfile.TemporaryDirectory(prefix="worker_checkpoint_") as scratch:
        tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1).save(
            checkpoint_number=int(self.step.numpy()))
      return
    os.makedirs(checkpoint_dir, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=checkpoint_dir, suffix=".npz.tmp")
    with os.fdopen(descriptor, "wb") as handle:
      np.savez(handle, trace=np.concatenate(self.traces), kl_trace=np.concatenate(self.kl_traces))
    os.replace(temporary, os.path.join(checkpoint_dir, _TRACE_FILENAME))
    manager = tf.train.CheckpointManager(self.checkpoint, checkpoint_dir, max_to_keep=1)
    manager.save(checkpoint_number=int(self.step.numpy()))

  def _summarise(self, writer: _ScalarWriter, first_step: int, trace: np.ndarray,
                 kl_trace: np.ndarray) -> None:
    """Every `summary_every`-th step's scalars and the chunk's last (member means)."""
    steps = first_step + 1 + np.arange(len(trace))
    kept = (steps % self.summary_every == 0) | (np.arange(len(trace)) == len(trace) - 1)
    objective = trace.reshape(len(trace), -1).mean(axis=1)[kept]
    kl = kl_trace.reshape(len(kl_trace), -1).mean(axis=1)[kept]
    writer.write(steps[kept], {self.objective_name.lower().replace(" ", "_"): objective,
                               "kl": kl, "expected_log_likelihood": objective + kl})

  def train(self, num_steps: int, checkpoint_dir: Optional[str] = None,
            summary_dir: Optional[str] = None,
            after_chunk: Optional[Callable[[], None]] = None) -> TrainingResult:
    """Trains until `num_steps` steps in total, resuming from `checkpoint_dir` if further along;
    calls `after_chunk()` after every chunk (e.g. to start work once the loop has compiled)."""
    num_steps = check_integer("num_steps", num_steps)
    if checkpoint_dir:
      self._restore(checkpoint_dir, num_steps)
    resumed_from_step = int(self.step.numpy())
    writer = _ScalarWriter(summary_dir) if summary_dir and writes_run_files() else None
    progress = ProgressLog(self.name, num_steps, resumed_from_step, self.objective_name)
    chunk_timings = []   # (steps, seconds) of this call's chunks
    while int(self.step.numpy()) < num_steps:
      first_step = int(self.step.numpy())
      chunk = min(self.steps_per_checkpoint, num_steps - first_step,
                  self.learning_rate.steps_at_this_rate(first_step) or num_steps)
      started = time.perf_counter()

      def report(done: int, trace: np.ndarray, first_step: int = first_step) -> None:
        """A progress line inside a long chunk (about every 30 s)."""
        progress.log(first_step + done, float(np.mean(trace[-self.summary_every:])))
      trace, kl_trace = self.loop.maximize(chunk, self.learning_rate.rate(first_step),
                                           return_kl=True, progress=report)
      chunk_timings.append((chunk, time.perf_counter() - started))
      self.train_seconds.assign_add(chunk_timings[-1][1])
      self.step.assign_add(chunk)
      self.traces.append(trace)
      self.kl_traces.append(kl_trace)
      if writer is not None:
        self._summarise(writer, first_step, trace, kl_trace)
      if checkpoint_dir:
        self._save(checkpoint_dir)
      progress.log(int(self.step.numpy()),
                   float(np.mean(trace[-min(len(trace), self.summary_every):])))
      if after_chunk is not None:
        after_chunk()
    if writer is not None:
      writer.close()
    trace = np.concatenate(self.traces)[:num_steps]
    kl_trace = np.concatenate(self.kl_traces)[:num_steps]
    return TrainingResult(trace=trace, kl_trace=kl_trace,
                          train_seconds=float(self.train_seconds.numpy()),
                          resumed_from_step=resumed_from_step,
                          setup_seconds=_setup_seconds(chunk_timings))


def _setup_seconds(chunk_timings: list[tuple[int, float]]) -> Optional[float]:
  """The first chunk's seconds beyond the pace (seconds per step) of the later chunks at least as
  long: a shorter one pays its per-call costs over fewer steps. None if there is none."""
  if not chunk_timings:
    return None
  first_steps, first_seconds = chunk_timings[0]
  comparable = [(steps, seconds) for steps, seconds in chunk_timings[1:] if steps >= first_steps]
  if not comparable:
    return None
  pace = sum(seconds for _, seconds in comparable) / sum(steps for steps, _ in comparable)
  return max(0.0, first_seconds - first_steps * pace)
