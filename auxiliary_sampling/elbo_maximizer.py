"""The compiled loop that maximises the (conditional) ELBO by minibatch Adam.

Mean-field VI and each refinement step maximise the same objective,
E_q log p(y | x, w) - KL(q(w) || p(w | a_1..k)) (paper Eq. 4), over different
variables: VI over all trainable variables (including the empirical-Bayes prior
scales), refinement over the posterior parameters only, with Adam reset for
every new auxiliary variable.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.batch_shards import batch_shard
from auxiliary_sampling.graph_loops import counted_loop, graph_function
from auxiliary_sampling.loop_settings import LoopSettings, current_loop_settings
from auxiliary_sampling.model_parameters import model_kl
from auxiliary_sampling.noise import DrawRequest, derived_seed, recorded_draws, supplied_draws
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.validation import check_integer
from auxiliary_sampling.weight_noise import check_weight_noise, weight_noise_scope

_TRANSFORM_STREAM = 1
# Noise drawn ahead of a chunk of steps is held in memory: at most this many bytes of it.
NOISE_CHUNK_BYTES = 128 * 2**20


def _data_tensors(inputs, labels, grouped_data: bool,
                  member_batches: Optional[int]) -> tuple[tf.Tensor, tf.Tensor]:
  """Checked data: variables stay variables (read at every step), the rest become tensors."""
  if not (isinstance(inputs, tf.Variable) and isinstance(labels, tf.Variable)):
    inputs, labels = check_data(inputs, labels)
  if grouped_data:
    if member_batches is None:
      raise ValueError("grouped_data needs member_batches (the number of members)")
    if inputs.shape.rank < 2 or inputs.shape[:2] != labels.shape[:2]:
      raise ValueError(f"grouped data are [groups, capacity, ...]: got inputs {inputs.shape} "
                       f"and labels {labels.shape}")
    if member_batches % int(inputs.shape[0]):
      raise ValueError(f"{member_batches} members do not split evenly over "
                       f"{inputs.shape[0]} data groups")
  elif inputs.shape[0] != labels.shape[0]:
    raise ValueError(f"inputs have {inputs.shape[0]} examples but labels have {labels.shape[0]}")
  return inputs, labels


class ElboMaximizer(tf.Module):
  """Maximises the (conditional) ELBO of `model` on in-memory data by minibatch Adam.

  Batches are drawn with replacement from a counter-based stream seeded by
  `data_seed`: one batch shared by all members, or with `member_batches=M`
  an independent batch per member (inputs [M, batch, ...], as deep-ensemble
  members need). `run` executes many steps in one compiled while-loop and
  returns the per-step, per-member ELBO estimate at the whole-dataset scale,
  N * mean_batch log p - KL - `elbo_offset`, and the KL. `kl_fn` replaces
  the Gaussian mean-field KL (MNF's bound term; zero for point estimates).
  Subclasses may override `expected_log_likelihood_on_batch` (the deep
  ensemble's adversarial training does). `weight_noise` (one of WEIGHT_NOISE)
  is how the model's mean-field layers draw noise in this loop's model calls.
  Data that differ per member or grow (a bandit's histories): with
  `grouped_data`, inputs and labels are [G, capacity, ...] and member m of
  `member_batches=M` trains on group m // (M / G); `num_examples`, a scalar
  integer variable, says how many leading rows (of each group) are the data
  now, N in the objective; inputs and labels given as variables are read at
  every step, so rows written later are seen.
  `optimizer_factory(variables)` builds the optimiser (default Adam): an object with
  `apply(gradients, learning_rate)` and `reset()`.
  `input_transform(inputs, seed)` (data augmentation) alters each gathered
  batch, its randomness from a stateless `seed` that the batch counter fixes.

  Built inside a `tf.distribute` strategy's scope, every step is
  data-parallel: the global batch of `batch_size` is split evenly over the
  replicas and the objective is the same as on one device (`_replica_step`).
  `loop_settings` (default: the enclosing `loop_settings_scope`'s) can draw
  the noise ahead of chunks of steps and compile each chunk with XLA.
  """

  def __init__(self, model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
               variables: Sequence[tf.Variable], batch_size: int, data_seed: int = 0,
               kl_fn: Optional[Callable[[], tf.Tensor]] = None,
               member_batches: Optional[int] = None, weight_noise: str = "per_example",
               input_transform: Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = None,
               grouped_data: bool = False, num_examples: Optional[tf.Variable] = None,
               loop_settings: Optional[LoopSettings] = None,
               optimizer_factory: Optional[Callable[[list[tf.Variable]], tf.Module]] = None):
    super().__init__(name="elbo_maximizer")
    self.weight_noise = check_weight_noise(weight_noise)
    batch_size = check_integer("batch_size", batch_size)
    if member_batches is not None:
      member_batches = check_integer("member_batches", member_batches)
    self.model = model
    self.kl_fn = kl_fn or (lambda: model_kl(model))
    self.member_batches = member_batches
    self.grouped_data = grouped_data
    self.inputs, self.labels = _data_tensors(inputs, labels, grouped_data, member_batches)
    capacity = int(self.inputs.shape[1 if grouped_data else 0])
    # N: a Python int for fixed data, the variable itself for data that grow.
    self.num_examples = capacity if num_examples is None else num_examples
    self.log_likelihood_fn = log_likelihood_fn
    self.variables_to_train = list(variables)
    if not self.variables_to_train:
      raise ValueError("no variables to train")
    # The strategy whose scope builds this object: its replicas share every step.
    self.strategy = tf.distribute.get_strategy()
    num_replicas = self.strategy.num_replicas_in_sync
    if batch_size % num_replicas:
      raise ValueError(f"batch_size={batch_size} does not split evenly over {num_replicas} "
                       f"replicas; allowed: a multiple of {num_replicas}")
    self.batch_size = batch_size
    self.input_transform = input_transform
    self.optimizer = (optimizer_factory or Adam)(self.variables_to_train)
    self.batch_counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    # The minibatch and input-transform streams' seeds: variables, so that `reseed` keeps the
    # compiled loops.
    self._stream_seeds = tf.Variable([0, 0], dtype=tf.int64, trainable=False)
    self.reseed(data_seed)
    self.loop_settings = loop_settings or current_loop_settings()
    if self.loop_settings.jit_compile and num_replicas > 1:
      raise ValueError(f"jit_compile compiles one device's loop, but the strategy has "
                       f"{num_replicas} replicas; allowed: jit_compile=False with several "
                       "(TPUStrategy compiles its steps itself)")
    # The draws one step makes, and its outputs' shapes: recorded by tracing it once.
    self._step_plan: Optional[tuple[list[DrawRequest], tf.TensorShape, tf.TensorShape]] = None
    self._compiled_chunk = graph_function(self._chunk_of_steps,
                                          jit_compile=self.loop_settings.jit_compile)

  @property
  def _batch_shape(self) -> list[int]:
    """One step's example indices: [batch], or [member_batches, batch]."""
    return ([self.batch_size] if self.member_batches is None
            else [self.member_batches, self.batch_size])

  def reseed(self, data_seed: int) -> None:
    """Restarts the minibatch and input-transform streams as a maximiser built with `data_seed`
    starts them; the compiled loops are kept (`refine.Refiner` reuses them across calls)."""
    self.data_seed = int(data_seed)
    self._stream_seeds.assign([self.data_seed, derived_seed(self.data_seed, _TRANSFORM_STREAM)])
    self.batch_counter.assign(0)

  def _batch_indices(self) -> tuple[tf.Tensor, Optional[tf.Tensor]]:
    """The next global minibatch's example indices, [batch] or [member_batches, batch], and the
    seed of its input transform (None without one)."""
    count = self.batch_counter.assign_add(1)
    seed = tf.stack([self._stream_seeds[0], count])
    transform_seed = None
    if self.input_transform is not None:
      transform_seed = tf.stack([self._stream_seeds[1], count])
    return self._example_indices(seed, count, None), transform_seed

  def _example_indices(self, seed: tf.Tensor, first_count: tf.Tensor,
                       num_steps: Optional[int]) -> tf.Tensor:
    """The example indices of `num_steps` steps ([num_steps, *batch shape]; None: of one step,
    [*batch shape]) whose batch counters start at `first_count`, from the stateless `seed`:
    uniform with replacement (subclasses may pick them otherwise, `methods.trainers.misso`)."""
    del first_count
    shape = self._batch_shape if num_steps is None else [num_steps, *self._batch_shape]
    return tf.random.stateless_uniform(shape, seed=seed, maxval=tf.cast(self.num_examples,
                                                                        tf.int64), dtype=tf.int64)

  def _gather(self, data: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """The rows `indices` of `data`, from each member's own group with `grouped_data`.

    Data held in a variable are gathered from the variable itself, except under XLA (which gathers
    no resources, and reads a variable's buffer without copying it). A variable once written
    through a slice (a bandit's history, row by row) is in TensorFlow's copy-on-read mode: reading
    it whole then copies all of it, at every step; gathering from it copies only the rows.
    """
    if self.loop_settings.jit_compile or not isinstance(data, tf.Variable):
      data = tf.convert_to_tensor(data)
    if not self.grouped_data:
      return tf.gather(data, indices)
    members_per_group = self.member_batches // int(data.shape[0])
    groups = tf.range(self.member_batches, dtype=tf.int64) // members_per_group
    groups = tf.broadcast_to(groups[:, tf.newaxis], tf.shape(indices))
    return tf.gather_nd(data, tf.stack([groups, indices], axis=-1))

  @property
  def _num_examples_float(self) -> tf.Tensor:
    return tf.cast(self.num_examples, tf.float32)

  def model_outputs(self, inputs) -> tf.Tensor:
    """The model's training-mode outputs, its layers drawing weight noise `weight_noise`-wise."""
    with weight_noise_scope(self.weight_noise):
      return self.model(inputs, training=True)

  def expected_log_likelihood_on_batch(self, inputs, labels) -> tf.Tensor:
    """N * mean_batch log p(y | x, w), one value per member."""
    log_likelihood = self.log_likelihood_fn(labels, self.model_outputs(inputs))
    return self._num_examples_float * tf.reduce_mean(log_likelihood, axis=-1)

  def _replica_share(self, indices: tf.Tensor):
    """(replica context, number of replicas, this replica's index, its inputs, its labels): the
    replica's equal, contiguous share of the global batch `indices`."""
    context = tf.distribute.get_replica_context()
    num_replicas = context.num_replicas_in_sync
    replica = context.replica_id_in_sync_group if num_replicas > 1 else 0
    local_batch = self.batch_size // num_replicas
    if num_replicas > 1:
      indices = indices[..., replica * local_batch:(replica + 1) * local_batch]
    inputs, labels = self._gather(self.inputs, indices), self._gather(self.labels, indices)
    return context, num_replicas, replica, inputs, labels

  def _replica_terms(self, num_replicas: int, replica, inputs, labels,
                     transform_seed) -> tuple[tf.Tensor, tf.Tensor]:
    """The ELBO's two terms on this replica's examples (expected log-likelihood, KL): the forward
    pass of a step, where all its random draws are made."""
    with batch_shard(num_replicas, replica):
      if self.input_transform is not None:
        inputs = self.input_transform(inputs, transform_seed)
      kl = self.kl_fn()
      return self.expected_log_likelihood_on_batch(inputs, labels), kl

  def _replica_step(self, indices: tf.Tensor, transform_seed: tf.Tensor,
                    learning_rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One Adam step on this replica's share of the global batch `indices`; (ELBO, KL).

    With R replicas each holds B / R examples. Its loss is its share of the
    global loss: its likelihood term (N * mean over its examples) and the KL,
    both divided by R. The all-reduced sum of the R gradients is then the
    gradient of N * mean over the global batch minus the KL counted once,
    the same objective as on one device, whatever R is.
    """
    context, num_replicas, replica, inputs, labels = self._replica_share(indices)
    with tf.GradientTape() as tape:
      expected_log_likelihood, kl = self._replica_terms(num_replicas, replica, inputs, labels,
                                                        transform_seed)
      elbo = expected_log_likelihood - kl
      # Members are independent, so the sum's gradient is each member's own.
      loss = -tf.reduce_sum(elbo if num_replicas == 1 else elbo / num_replicas
                            ) / self._num_examples_float
    gradients = tape.gradient(loss, self.variables_to_train)
    if num_replicas > 1:
      gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
      elbo = context.all_reduce(tf.distribute.ReduceOp.MEAN, expected_log_likelihood) - kl
    self.optimizer.apply(gradients, learning_rate)
    return elbo, kl

  def _first_replica(self, values):
    """Values equal on every replica (all-reduced): the first replica's."""
    return tuple(self.strategy.experimental_local_results(value)[0] for value in values)

  @graph_function
  def run(self, num_steps: tf.Tensor, learning_rate: tf.Tensor,
          elbo_offset: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`num_steps` Adam steps; returns the [num_steps, M?] traces of ELBO estimates and KLs.

    Under a `tf.distribute` strategy (the one whose scope built this object)
    every step is data-parallel over its replicas (`_replica_step`).
    """
    learning_rate = tf.cast(learning_rate, tf.float32)
    if self.loop_settings.noise_chunk_steps:
      elbo_trace, kl_trace = self._run_drawn_ahead(num_steps, learning_rate)
    else:
      elbo_trace, kl_trace = self._run_drawing_inside(num_steps, learning_rate)
    return elbo_trace - elbo_offset, tf.broadcast_to(kl_trace, tf.shape(elbo_trace))

  def _run_drawing_inside(self, num_steps, learning_rate) -> tuple[tf.Tensor, tf.Tensor]:
    """Steps that draw their own noise: one counter of each stream per step."""
    def step(index, elbo_trace, kl_trace):
      indices, transform_seed = self._batch_indices()
      elbo, kl = self._first_replica(self.strategy.run(
          self._replica_step, args=(indices, transform_seed, learning_rate)))
      return (elbo_trace.write(index, elbo),
              kl_trace.write(index, tf.broadcast_to(kl, tf.shape(elbo))))
    elbo_trace, kl_trace = counted_loop(num_steps, step, (
        tf.TensorArray(tf.float32, size=num_steps), tf.TensorArray(tf.float32, size=num_steps)))
    return elbo_trace.stack(), kl_trace.stack()

  def _record_step_plan(self) -> None:
    """Traces one step's forward pass (never runs it; the gradient and update draw nothing) to
    note the draws its layers make and its outputs' shapes; each replica traces its own, and all
    make the same requests.

    The first time a graph calls a Keras Sequential with a new input shape, Keras builds its
    graph network by calling every layer once more in a scratch graph, and those calls draw
    too (a per_batch refinement whose members had only been called eagerly recorded every draw
    twice). So the forward pass is traced twice and only the second trace is recorded."""
    recorded = []

    def forward_pass(indices, transform_seed, record: bool):
      _, num_replicas, replica, inputs, labels = self._replica_share(indices)
      with recorded_draws() if record else contextlib.nullcontext([]) as requests:
        expected_log_likelihood, kl = self._replica_terms(num_replicas, replica, inputs, labels,
                                                          transform_seed)
      if record:
        recorded.append((requests, (expected_log_likelihood - kl).shape, kl.shape))

    def trace(record: bool):
      shape = self._batch_shape
      transform_seed = None if self.input_transform is None else tf.zeros([2], tf.int64)
      self.strategy.run(functools.partial(forward_pass, record=record),
                        args=(tf.zeros(shape, tf.int64), transform_seed))

    for record in (False, True):
      graph_function(functools.partial(trace, record)).get_concrete_function()
    self._step_plan = recorded[0]

  def _chunk_length(self) -> int:
    """Steps per chunk: the setting, or fewer if their noise would pass NOISE_CHUNK_BYTES."""
    requests = self._step_plan[0]
    step_bytes = sum(int(np.prod(r.shape)) * r.dtype.size for r in requests)
    return max(1, min(self.loop_settings.noise_chunk_steps,
                      NOISE_CHUNK_BYTES // max(step_bytes, 1)))

  def _chunk_batches(self, chunk: int, steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """[chunk, ...] batch indices of the next `steps` steps (rows past them unused) from one
    counter of the data stream, and each step's input-transform seed."""
    steps = tf.cast(steps, tf.int64)
    first = self.batch_counter.assign_add(steps) - steps + 1
    indices = self._example_indices(tf.stack([self._stream_seeds[0], first]), first, chunk)
    transform_seeds = tf.stack([tf.fill([chunk], self._stream_seeds[1]),
                                first + tf.range(chunk, dtype=tf.int64)], axis=1)
    return indices, transform_seeds

  def _supplied_step(self, indices, transform_seed, draws, learning_rate):
    """`_replica_step` with its layers' noise taken from `draws` (this step's rows)."""
    if self.input_transform is None:
      transform_seed = None
    with supplied_draws(self._step_plan[0], draws):
      return self._replica_step(indices, transform_seed, learning_rate)

  def _chunk_loop(self, step_fn, steps, indices, transform_seeds, draws, learning_rate):
    """Runs `steps` (<= chunk) steps of `step_fn` from noise drawn ahead; [chunk, M?] ELBOs and
    KLs (rows past `steps` zero, so that the shapes are static for XLA)."""
    _, elbo_shape, kl_shape = self._step_plan
    chunk = int(indices.shape[0])
    def step(index, elbos, kls):
      elbo, kl = step_fn(indices[index], transform_seeds[index], [d[index] for d in draws],
                         learning_rate)
      return (tf.tensor_scatter_nd_update(elbos, [[index]], elbo[tf.newaxis]),
              tf.tensor_scatter_nd_update(kls, [[index]], kl[tf.newaxis]))
    return counted_loop(steps, step,
                        (tf.zeros([chunk, *elbo_shape]), tf.zeros([chunk, *kl_shape])))

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
    if self._step_plan is None:
      self._record_step_plan()
    chunk = self._chunk_length()
    num_chunks = (num_steps + chunk - 1) // chunk

    def draw_chunk(number):
      steps = tf.minimum(chunk, num_steps - number * chunk)
      indices, transform_seeds = self._chunk_batches(chunk, steps)
      return (indices, transform_seeds,
              [request.draw_ahead(chunk) for request in self._step_plan[0]])

    def no_draws():
      return (tf.zeros([chunk, *self._batch_shape], tf.int64), tf.zeros([chunk, 2], tf.int64),
              [tf.zeros([chunk, *request.shape], request.dtype)
               for request in self._step_plan[0]])

    def run_chunk(number, elbo_chunks, kl_chunks, indices, transform_seeds, draws):
      steps = tf.minimum(chunk, num_steps - number * chunk)
      arguments = (steps, indices, transform_seeds, draws, learning_rate)
      if self.strategy.num_replicas_in_sync == 1:
        elbos, kls = self._first_replica(self.strategy.run(self._compiled_chunk, args=arguments))
      else:
        elbos, kls = self._replicated_chunk(*arguments)
      upcoming = tf.cond(number + 1 < num_chunks, lambda: draw_chunk(number + 1), no_draws)
      return (elbo_chunks.write(number, elbos), kl_chunks.write(number, kls), *upcoming)
    first = tf.cond(num_chunks > 0, lambda: draw_chunk(0), no_draws)
    elbo_chunks, kl_chunks, *_ = counted_loop(num_chunks, run_chunk, (
        tf.TensorArray(tf.float32, size=num_chunks), tf.TensorArray(tf.float32, size=num_chunks),
        *first))
    return elbo_chunks.concat()[:num_steps], kl_chunks.concat()[:num_steps]

  def tracing_count(self) -> int:
    """How many times its loops have been traced so far: benchmarks check that a timed call
    traced nothing."""
    return (self.run.experimental_get_tracing_count()
            + self._compiled_chunk.experimental_get_tracing_count())

  def maximize(self, num_steps: int, learning_rate: float, elbo_offset=0.0,
               reset_optimizer: bool = False, return_kl: bool = False):
    """Runs the compiled loop; raises FloatingPointError if the ELBO stops being finite.

    Returns the ELBO trace, or (ELBO trace, KL trace) with `return_kl`.
    """
    if reset_optimizer:
      self.optimizer.reset()
    trace, kl_trace = self.run(tf.constant(num_steps, tf.int32),
                               tf.constant(learning_rate, tf.float32),
                               tf.convert_to_tensor(elbo_offset, tf.float32))
    trace = trace.numpy()
    if not np.all(np.isfinite(trace)):
      first = int(np.argmax(~np.isfinite(trace).reshape(len(trace), -1).all(axis=1)))
      raise FloatingPointError(f"non-finite ELBO at step {first + 1} of {num_steps} "
                               f"(learning rate {learning_rate:g})")
    return (trace, kl_trace.numpy()) if return_kl else trace
