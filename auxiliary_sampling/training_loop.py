"""The compiled minibatch training loop, extended only through the objects it is given.

`TrainingLoop` owns what every method's training shares: the minibatch index
stream (drawn with replacement from counter-based seeds), the compiled
while-loop over many steps, the split of each step over the replicas of a
`tf.distribute` strategy, noise drawn ahead of chunks of steps (XLA), and the
per-step trace. What a step computes is the caller's:

- an `Objective`: the per-replica terms of a step's forward pass (where all
  its random draws are made), e.g. the ELBO's (`auxiliary_sampling.elbo_objective`);
- an `Update`: what a step does with them, e.g. an Adam step on the negated
  objective (`GradientUpdate`), VOGN's natural-gradient update, SVGD's;
- a `BatchSource` (`auxiliary_sampling.training_batches`): the data and how a
  step's minibatch is drawn (shared, per member, per data group, MISSO's blocks);
- an optional input transform (data augmentation) and the `LoopSettings`;
- an optional `progress` hook of `maximize`, called about every PROGRESS_SECONDS of wall time
  between compiled pieces of whole chunks of steps, so that a long loop reports its progress
  without any Python per step.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, NamedTuple, Optional, Protocol

import numpy as np
import tensorflow as tf

from auxiliary_sampling.batch_shards import batch_shard
from auxiliary_sampling.graph_loops import counted_loop, graph_function
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.noise import DrawRequest, derived_seed, recorded_draws, supplied_draws
from auxiliary_sampling.progress import PROGRESS_SECONDS
from auxiliary_sampling.training_batches import BatchSource

_TRANSFORM_STREAM = 1
# Noise drawn ahead of a chunk of steps is held in memory: at most this many bytes of it.
NOISE_CHUNK_BYTES = 128 * 2**20
# (training inputs, stateless seed) -> transformed inputs (runner.image_augmentation).
InputTransform = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
# (steps done in this `maximize` call, the trace of those steps) -> None: a progress report.
ProgressHook = Callable[[int, np.ndarray], None]


class ReplicaBatch(NamedTuple):
  """One replica's share of a step's global minibatch, as objectives and updates see it."""
  inputs: tf.Tensor           # this replica's rows, transformed if the loop has a transform
  labels: tf.Tensor
  indices: tf.Tensor          # the global batch's example indices (every replica's)
  num_examples: tf.Tensor     # N as float32: the objective's whole-dataset scale
  num_replicas: int
  context: Any                # the replica context (its `all_reduce` makes values global)


class Objective(Protocol):
  """The terms a step maximises, on one replica's examples. A `tf.Module` if it holds state a
  step changes (a random stream of its own), so that checkpoints of the loop hold it."""
  model: tf.Module            # its variables are saved by checkpoints

  def terms(self, batch: ReplicaBatch) -> tuple[tf.Tensor, tf.Tensor]:
    """(likelihood term [M?], KL term): the step's forward pass, where all its random draws are
    made; the loop records (likelihood term - KL term) and the KL term."""


class Update(Protocol):
  """What a step does with an objective: moves the variables and returns what to record. A
  `tf.Module`, so that checkpoints of the loop hold its optimiser's state. An update whose state
  needs a first look at the data has `initialise(objective, batch)`, which
  `TrainingLoop.initialise` runs."""
  optimizer: tf.Module        # its state, saved by checkpoints

  def step(self, objective: Objective, batch: ReplicaBatch, learning_rate: tf.Tensor
           ) -> tuple[tf.Tensor, tf.Tensor]:
    """One step on this replica's `batch`; (value, KL term) to record, equal on every replica."""

  def reset(self) -> None:
    """Forgets the state (a fresh optimiser)."""


class TrainingLoop(tf.Module):
  """Steps of `update` on `objective` over minibatches of `batches`, many in one compiled loop.

  A module whose dependencies hold all the state its steps change (the batch counter, the
  objective's and the update's variables, when they are modules), so that a checkpoint of an
  object holding the loop resumes it exactly (a bandit agent's).

  Batches come from a counter-based stream seeded by `data_seed`, the input
  transform's seeds from a second one that the batch counter fixes too.
  Built inside a `tf.distribute` strategy's scope, every step is
  data-parallel: the global batch is split evenly over the replicas (each
  replica's share in `ReplicaBatch`; the update all-reduces what it must).
  `loop_settings` can draw the noise ahead of chunks of steps and compile
  each chunk with XLA.
  """

  def __init__(self, objective: Objective, update: Update, batches: BatchSource, *,
               data_seed: int = 0, input_transform: Optional[InputTransform] = None,
               loop_settings: LoopSettings = LoopSettings()):
    super().__init__(name="training_loop")
    self.objective, self.update, self.batches = objective, update, batches
    self.input_transform = input_transform
    # The strategy whose scope builds this object: its replicas share every step.
    self.strategy = tf.distribute.get_strategy()
    num_replicas = self.strategy.num_replicas_in_sync
    if batches.batch_size % num_replicas:
      raise ValueError(f"batch_size={batches.batch_size} does not split evenly over "
                       f"{num_replicas} replicas; allowed: a multiple of {num_replicas}")
    self.batch_counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    # The minibatch and input-transform streams' seeds: variables, so that `reseed` keeps the
    # compiled loops.
    self._stream_seeds = tf.Variable([0, 0], dtype=tf.int64, trainable=False)
    self.reseed(data_seed)
    self.loop_settings = loop_settings
    if self.loop_settings.jit_compile and num_replicas > 1:
      raise ValueError(f"jit_compile compiles one device's loop, but the strategy has "
                       f"{num_replicas} replicas; allowed: jit_compile=False with several "
                       "(TPUStrategy compiles its steps itself)")
    # The draws one step makes, and its outputs' shapes: recorded by tracing it once.
    self.step_plan: Optional[tuple[list[DrawRequest], tf.TensorShape, tf.TensorShape]] = None
    # Wall seconds per step of the latest piece `maximize` timed (None before the first).
    self._seconds_per_step: Optional[float] = None
    self._compiled_chunk = graph_function(self._chunk_of_steps,
                                          jit_compile=self.loop_settings.jit_compile)

  def reseed(self, data_seed: int) -> None:
    """Restarts the minibatch and input-transform streams as a loop built with `data_seed`
    starts them; the compiled loops are kept (`refine.Refiner` reuses them across calls)."""
    self.data_seed = int(data_seed)
    self._stream_seeds.assign([self.data_seed, derived_seed(self.data_seed, _TRANSFORM_STREAM)])
    self.batch_counter.assign(0)

  def _batch_indices(self) -> tuple[tf.Tensor, Optional[tf.Tensor]]:
    """The next global minibatch's example indices and the seed of its input transform (None
    without one)."""
    count = self.batch_counter.assign_add(1)
    seed = tf.stack([self._stream_seeds[0], count])
    transform_seed = None
    if self.input_transform is not None:
      transform_seed = tf.stack([self._stream_seeds[1], count])
    return self.batches.example_indices(seed, count, None), transform_seed

  def batch_rows(self, data, indices: tf.Tensor) -> tf.Tensor:
    """The rows `indices` of `data` (the source's inputs or labels).

    Data held in a variable are gathered from the variable itself, except under XLA (which gathers
    no resources, and reads a variable's buffer without copying it). A variable once written
    through a slice (a bandit's history, row by row) is in TensorFlow's copy-on-read mode: reading
    it whole then copies all of it, at every step; gathering from it copies only the rows.
    """
    if self.loop_settings.jit_compile or not isinstance(data, tf.Variable):
      data = tf.convert_to_tensor(data)
    return self.batches.gather(data, indices)

  def _replica_batch(self, indices: tf.Tensor, transform_seed: Optional[tf.Tensor]
                     ) -> ReplicaBatch:
    """This replica's equal, contiguous share of the global batch `indices`, transformed."""
    context = tf.distribute.get_replica_context()
    num_replicas = context.num_replicas_in_sync
    local_indices = indices
    if num_replicas > 1:
      local_batch = self.batches.batch_size // num_replicas
      replica = context.replica_id_in_sync_group
      local_indices = indices[..., replica * local_batch:(replica + 1) * local_batch]
    inputs = self.batch_rows(self.batches.inputs, local_indices)
    labels = self.batch_rows(self.batches.labels, local_indices)
    if self.input_transform is not None:
      inputs = self.input_transform(inputs, transform_seed)
    return ReplicaBatch(inputs, labels, indices, tf.cast(self.batches.num_examples, tf.float32),
                        num_replicas, context)

  @contextlib.contextmanager
  def _on_replica(self, indices, transform_seed):
    """This replica's batch, inside the shard that cuts per-example noise to its rows."""
    context = tf.distribute.get_replica_context()
    num_replicas = context.num_replicas_in_sync
    with batch_shard(num_replicas, context.replica_id_in_sync_group if num_replicas > 1 else 0):
      yield self._replica_batch(indices, transform_seed)

  def _replica_step(self, indices: tf.Tensor, transform_seed: Optional[tf.Tensor],
                    learning_rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    with self._on_replica(indices, transform_seed) as batch:
      return self.update.step(self.objective, batch, learning_rate)

  def _first_replica(self, values):
    """Values equal on every replica (all-reduced): the first replica's."""
    return tuple(self.strategy.experimental_local_results(value)[0] for value in values)

  @graph_function
  def initialise(self, indices: tf.Tensor) -> None:
    """Runs the update's `initialise(objective, batch)` on the global batch `indices` (VOGN's
    curvature from a first minibatch)."""
    def replica_initialise(indices):
      with self._on_replica(indices, None) as batch:
        self.update.initialise(self.objective, batch)
    self.strategy.run(replica_initialise, args=(indices,))

  @graph_function
  def run(self, num_steps: tf.Tensor, learning_rate: tf.Tensor,
          elbo_offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`num_steps` steps; returns the [num_steps, M?] traces of recorded values (an ELBO
    estimate: N * mean_batch log p - KL, minus `elbo_offset`) and KL terms."""
    learning_rate = tf.cast(learning_rate, tf.float32)
    if self.loop_settings.noise_chunk_steps:
      value_trace, kl_trace = self._run_drawn_ahead(num_steps, learning_rate)
    else:
      value_trace, kl_trace = self._run_drawing_inside(num_steps, learning_rate)
    return value_trace - elbo_offset, tf.broadcast_to(kl_trace, tf.shape(value_trace))

  def _run_drawing_inside(self, num_steps, learning_rate) -> tuple[tf.Tensor, tf.Tensor]:
    """Steps that draw their own noise: one counter of each stream per step."""
    def step(index, value_trace, kl_trace):
      indices, transform_seed = self._batch_indices()
      value, kl = self._first_replica(self.strategy.run(
          self._replica_step, args=(indices, transform_seed, learning_rate)))
      return (value_trace.write(index, value),
              kl_trace.write(index, tf.broadcast_to(kl, tf.shape(value))))
    value_trace, kl_trace = counted_loop(num_steps, step, (
        tf.TensorArray(tf.float32, size=num_steps), tf.TensorArray(tf.float32, size=num_steps)))
    return value_trace.stack(), kl_trace.stack()

  def _record_step_plan(self) -> None:
    """Traces one step's forward pass (never runs it; the update draws nothing else) to note the
    draws its layers make and its outputs' shapes; each replica traces its own, and all make the
    same requests. Only the draws made in the trace's graph are noted: not those of the layer
    calls Keras makes in a scratch graph of its own (`recorded_draws`)."""
    recorded = []

    def forward_pass(indices, transform_seed):
      with self._on_replica(indices, transform_seed) as batch:
        with recorded_draws(tf.compat.v1.get_default_graph()) as requests:
          likelihood_term, kl = self.objective.terms(batch)
      recorded.append((requests, (likelihood_term - kl).shape, kl.shape))

    def trace():
      transform_seed = None if self.input_transform is None else tf.zeros([2], tf.int64)
      self.strategy.run(forward_pass,
                        args=(tf.zeros(self.batches.batch_shape, tf.int64), transform_seed))

    graph_function(trace).get_concrete_function()
    self.step_plan = recorded[0]

  def _chunk_length(self) -> int:
    """Steps per chunk: the setting, or fewer if their noise would pass NOISE_CHUNK_BYTES."""
    requests = self.step_plan[0]
    step_bytes = sum(int(np.prod(r.shape)) * r.dtype.size for r in requests)
    return max(1, min(self.loop_settings.noise_chunk_steps,
                      NOISE_CHUNK_BYTES // max(step_bytes, 1)))

  def _chunk_batches(self, chunk: int, steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """[chunk, ...] batch indices of the next `steps` steps (rows past them unused) from one
    counter of the data stream, and each step's input-transform seed."""
    steps = tf.cast(steps, tf.int64)
    first = self.batch_counter.assign_add(steps) - steps + 1
    indices = self.batches.example_indices(tf.stack([self._stream_seeds[0], first]), first, chunk)
    transform_seeds = tf.stack([tf.fill([chunk], self._stream_seeds[1]),
                                first + tf.range(chunk, dtype=tf.int64)], axis=1)
    return indices, transform_seeds

  def _supplied_step(self, indices, transform_seed, draws, learning_rate):
    """`_replica_step` with its layers' noise taken from `draws` (this step's rows)."""
    if self.input_transform is None:
      transform_seed = None
    with supplied_draws(self.step_plan[0], draws):
      return self._replica_step(indices, transform_seed, learning_rate)

  def _chunk_loop(self, step_fn, steps, indices, transform_seeds, draws, learning_rate):
    """Runs `steps` (<= chunk) steps of `step_fn` from noise drawn ahead; [chunk, M?] values and
    KLs (rows past `steps` zero, so that the shapes are static for XLA)."""
    _, value_shape, kl_shape = self.step_plan
    chunk = int(indices.shape[0])
    def step(index, values, kls):
      value, kl = step_fn(indices[index], transform_seeds[index], [d[index] for d in draws],
                          learning_rate)
      return (tf.tensor_scatter_nd_update(values, [[index]], value[tf.newaxis]),
              tf.tensor_scatter_nd_update(kls, [[index]], kl[tf.newaxis]))
    return counted_loop(steps, step,
                        (tf.zeros([chunk, *value_shape]), tf.zeros([chunk, *kl_shape])))

  def _chunk_of_steps(self, *arguments):
    """A chunk on one replica: one computation, compiled with XLA under jit_compile."""
    return self._chunk_loop(self._supplied_step, *arguments)

  def _replicated_step(self, *arguments):
    return self._first_replica(self.strategy.run(self._supplied_step, args=arguments))

  def _replicated_chunk(self, *arguments):
    """A chunk over several replicas: one `strategy.run` per step (its all-reduce cannot sit
    inside a compiled loop)."""
    return self._chunk_loop(self._replicated_step, *arguments)

  def _run_drawn_ahead(self, num_steps, learning_rate) -> tuple[tf.Tensor, tf.Tensor]:
    """Chunks of steps, each with its indices and noise drawn before it (one counter of each
    stream per chunk); on one replica a chunk is one (XLA-compilable) computation.

    The next chunk's numbers are drawn while this chunk runs: the two share no variable, so
    TensorFlow runs them side by side on a second core (the draws are about half of a
    refinement step here). The draws and their order are those of drawing each chunk just
    before it, and nothing is drawn past the last chunk."""
    if self.step_plan is None:
      self._record_step_plan()
    chunk = self._chunk_length()
    num_chunks = (num_steps + chunk - 1) // chunk

    def draw_chunk(number):
      steps = tf.minimum(chunk, num_steps - number * chunk)
      indices, transform_seeds = self._chunk_batches(chunk, steps)
      return (indices, transform_seeds,
              [request.draw_ahead(chunk) for request in self.step_plan[0]])

    def no_draws():
      return (tf.zeros([chunk, *self.batches.batch_shape], tf.int64),
              tf.zeros([chunk, 2], tf.int64),
              [tf.zeros([chunk, *request.shape], request.dtype)
               for request in self.step_plan[0]])

    def run_chunk(number, value_chunks, kl_chunks, indices, transform_seeds, draws):
      steps = tf.minimum(chunk, num_steps - number * chunk)
      arguments = (steps, indices, transform_seeds, draws, learning_rate)
      if self.strategy.num_replicas_in_sync == 1:
        values, kls = self._first_replica(self.strategy.run(self._compiled_chunk,
                                                            args=arguments))
      else:
        values, kls = self._replicated_chunk(*arguments)
      upcoming = tf.cond(number + 1 < num_chunks, lambda: draw_chunk(number + 1), no_draws)
      return (value_chunks.write(number, values), kl_chunks.write(number, kls), *upcoming)
    first = tf.cond(num_chunks > 0, lambda: draw_chunk(0), no_draws)
    value_chunks, kl_chunks, *_ = counted_loop(num_chunks, run_chunk, (
        tf.TensorArray(tf.float32, size=num_chunks), tf.TensorArray(tf.float32, size=num_chunks),
        *first))
    return value_chunks.concat()[:num_steps], kl_chunks.concat()[:num_steps]

  def tracing_count(self) -> int:
    """How many times its loops have been traced so far: benchmarks check that a timed call
    traced nothing."""
    return (self.run.experimental_get_tracing_count()
            + self._compiled_chunk.experimental_get_tracing_count())

  def chunk_tracing_count(self) -> int:
    """How many times the chunk of steps (the XLA computation under jit_compile) was traced."""
    return self._compiled_chunk.experimental_get_tracing_count()

  def steps_per_piece(self) -> int:
    """The steps a compiled call can stop after and the next continue from, drawing the numbers
    one call would: one step when each step draws its own noise, else one chunk of drawn-ahead
    noise (a call cut inside a chunk would draw the chunk's rows again)."""
    if not self.loop_settings.noise_chunk_steps:
      return 1
    if self.step_plan is None:
      self._record_step_plan()
    return self._chunk_length()

  def maximize(self, num_steps: int, learning_rate: float, elbo_offset=0.0,
               reset_optimizer: bool = False, return_kl: bool = False,
               progress: Optional[ProgressHook] = None,
               progress_seconds: float = PROGRESS_SECONDS):
    """Runs the compiled loop; raises FloatingPointError if the trace stops being finite.

    Returns the trace, or (trace, KL trace) with `return_kl`. Without `progress` the steps are one
    compiled call. With it they are a few calls, each of whole pieces (`steps_per_piece`) and
    sized from the pace of the one before to end about `progress_seconds` after the previous
    report, and `progress(steps done, trace so far)` is called whenever that much wall time has
    passed (not after the last call: the caller reports its own end). The calls draw the same
    numbers in the same order as one call, so the result is the same bit for bit (tested). The
    workers of a multi-worker strategy all make the first replica's calls.
    """
    if reset_optimizer:
      self.update.reset()
    learning_rate_tensor = tf.constant(learning_rate, tf.float32)
    elbo_offset = tf.convert_to_tensor(elbo_offset, tf.float32)
    if progress is None or num_steps == 0:
      trace, kl_trace = self.run(tf.constant(num_steps, tf.int32), learning_rate_tensor,
                                 elbo_offset)
      trace, kl_trace = trace.numpy(), kl_trace.numpy()
      self._check_finite(trace, 0, num_steps, learning_rate)
      return (trace, kl_trace) if return_kl else trace
    unit = self.steps_per_piece()
    traces, kl_traces, done = [], [], 0
    reported = time.perf_counter()
    while done < num_steps:
      due = reported + progress_seconds - time.perf_counter()
      length = unit if self._seconds_per_step is None else max(
          unit, int(due / max(self._seconds_per_step, 1e-9)) // unit * unit)
      length = self._agreed_piece_length(min(length, num_steps - done))
      started = time.perf_counter()
      trace, kl_trace = self.run(tf.constant(length, tf.int32), learning_rate_tensor, elbo_offset)
      traces.append(trace.numpy())
      kl_traces.append(kl_trace.numpy())
      now = time.perf_counter()
      self._seconds_per_step = (now - started) / max(length, 1)
      self._check_finite(traces[-1], done, num_steps, learning_rate)
      done += length
      # A report within a tenth of the interval of being due is on time.
      if done < num_steps and now - reported >= 0.9 * progress_seconds:
        progress(done, np.concatenate(traces))
        reported = now
    trace, kl_trace = np.concatenate(traces), np.concatenate(kl_traces)
    return (trace, kl_trace) if return_kl else trace

  def _agreed_piece_length(self, length: int) -> int:
    """The first replica's `length` on every worker of a multi-worker strategy (else `length`).

    Each worker sizes its pieces from its own clock, but the workers' collective ops pair up only
    if every worker makes the same calls: pieces of different lengths deadlock them (LeNet-5's
    two workers hung at their first progress report)."""
    if not isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
      return length
    return int(self._first_replicas(tf.constant(length, tf.int64)).numpy())

  @graph_function
  def _first_replicas(self, value: tf.Tensor) -> tf.Tensor:
    """The first replica's `value` (an int64 scalar), on every replica."""
    def replica_value(value):
      context = tf.distribute.get_replica_context()
      first = tf.equal(context.replica_id_in_sync_group, 0)
      return context.all_reduce(tf.distribute.ReduceOp.SUM,
                                tf.where(first, value, tf.zeros_like(value)))
    return self.strategy.experimental_local_results(
        self.strategy.run(replica_value, args=(value,)))[0]

  @staticmethod
  def _check_finite(trace: np.ndarray, first_step: int, num_steps: int,
                    learning_rate: float) -> None:
    """Raises FloatingPointError naming the first step (of `num_steps`) whose value is not
    finite; `trace` holds the steps from `first_step` on."""
    if np.all(np.isfinite(trace)):
      return
    first = first_step + int(np.argmax(~np.isfinite(trace).reshape(len(trace), -1).all(axis=1)))
    raise FloatingPointError(f"non-finite ELBO at step {first + 1} of {num_steps} "
                             f"(learning rate {learning_rate:g})")
