"""Per-member streams of random numbers.

Every member of a vectorised computation draws from its own counter-based
(stateless) stream, so M members computed together see exactly the numbers
each would see when computed alone. That is what lets a test check that the
vectorised refinement equals M separate refinements.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util  # shape inference of shape tensors
# The graphs of loop bodies and branches.
from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

from auxiliary_sampling.batch_shards import global_rows, local_rows, shard_count

AddWeight = Callable[..., tf.Variable]


def derived_seed(*keys: int) -> int:
  """A well-mixed 31-bit seed from a tuple of non-negative integers: run seed, stream, member..."""
  return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0] >> 1)


def box_muller_normal(shape, seed: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
  """Standard normals of `shape` from one stateless uniform draw by the Box-Muller transform.

  For n values it draws [2, ceil(n / 2)] float32 uniforms (u, v) and returns
  sqrt(-2 log(1 - u)) * (cos 2 pi v, sin 2 pi v), flattened cosines first:
  exact N(0, 1) pairs for uniform (u, v), independent within a pair. On this
  CPU it takes half the time of `tf.random.stateless_normal` for the weight
  noise of a 10-member UCI step (3.4 -> 2.0 ms per step, benchmarks/step_floor).
  The float32 uniforms' resolution of 2^-24 truncates |z| at 5.8 (probability 2e-8).
  Value e of the flattened result depends only on e and the total size, so a
  member's rows of an [M, ...] draw are the same whatever window of it a layer keeps.
  """
  shape = tf.cast(shape, tf.int32)
  size = tf.reduce_prod(shape)
  half = (size + 1) // 2
  uniforms = tf.random.stateless_uniform(tf.stack([2, half]), seed=seed, dtype=tf.float32)
  radius = tf.sqrt(-2.0 * tf.math.log1p(-uniforms[0]))
  angle = (2.0 * np.pi) * uniforms[1]
  normals = tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], 0)[:size]
  return tf.cast(tf.reshape(normals, shape), dtype)


def random_signs(shape, seed: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
  """Uniform +1/-1 of `shape` from one stateless draw."""
  bits = tf.random.stateless_uniform(shape, seed, minval=0, maxval=2, dtype=tf.int32)
  return tf.cast(2 * bits - 1, dtype)


_SAMPLERS = {"normal": box_muller_normal, "sign": random_signs}


class DrawRequest(NamedTuple):
  """One draw a layer makes in a step: from which stream, of what kind, shape and dtype."""
  noise: "MemberNoise"
  kind: str
  shape: tuple[int, ...]
  dtype: tf.DType

  def draw_ahead(self, steps: int) -> tf.Tensor:
    """[steps, *shape] draws for `steps` steps at once, one counter of the stream."""
    seed = tf.stack([self.noise.seed, self.noise.counter.assign_add(1)])
    return _SAMPLERS[self.kind]([steps, *self.shape], seed, self.dtype)


def _part_of(graph: tf.Graph, step_graph: tf.Graph) -> bool:
  """Whether ops built in `graph` belong to `step_graph`: it is that graph, or a loop body or
  branch inside it (not a graph of its own that Keras builds within it)."""
  while graph is not step_graph:
    if not isinstance(graph, ControlFlowFuncGraph):
      return False
    graph = graph.outer_graph
  return True


class _DrawRecorder:
  """Notes the draw requests made in `graph` (anywhere if None) and answers every request with
  zeros (a trace that is never run)."""

  def __init__(self, graph: Optional[tf.Graph] = None):
    self.graph = graph
    self.requests: list[DrawRequest] = []

  def take(self, request: DrawRequest) -> tf.Tensor:
    if self.graph is None or _part_of(tf.compat.v1.get_default_graph(), self.graph):
      self.requests.append(request)
    return tf.zeros(request.shape, request.dtype)


class _DrawSupplier:
  """Answers the draw requests of one step, in order, with draws made ahead of it."""

  def __init__(self, requests: Sequence[DrawRequest], draws: Sequence[tf.Tensor]):
    self.pending = list(zip(requests, draws))

  def take(self, request: DrawRequest) -> tf.Tensor:
    if not self.pending:
      raise ValueError(f"the step asked for more draws than recorded (next: {request.kind} "
                       f"{request.shape}): it must draw the same every step")
    expected, draws = self.pending.pop(0)
    if expected != request:
      raise ValueError(f"the step drew {request.kind} {request.shape} where {expected.kind} "
                       f"{expected.shape} was recorded: it must draw the same every step")
    return draws


# Who answers the layers' draws while a training loop records or supplies them (None: each draw
# is made where it is asked for). Context, not an argument: the draws are made inside the layers'
# `call`s, which Keras containers reach with `training` and `mask` only; context-local, because
# replicas trace their steps in separate threads.
_draw_plan: contextvars.ContextVar = contextvars.ContextVar("draw_plan", default=None)


def _static_shape(shape: tf.Tensor) -> tuple[int, ...]:
  """The value of a shape tensor known at trace time. `tf.get_static_value` does not see through
  slices of `tf.shape`, which layers use; TensorFlow's shape inference does."""
  value = tf.get_static_value(shape)
  if value is None:
    inferred = tensor_util.constant_value_as_shape(shape)
    value = inferred.as_list() if inferred.is_fully_defined() else None
  if value is None:
    raise ValueError("noise drawn ahead of a step needs static shapes; this layer's draw shape "
                     "is only known when the step runs (draw inside the step instead)")
  return tuple(int(d) for d in value)


@contextlib.contextmanager
def recorded_draws(graph: Optional[tf.Graph] = None) -> Iterator[list[DrawRequest]]:
  """Inside the block, layers' draws are noted (in order) and answered with zeros. With `graph`,
  only the draws that are part of it are noted: the first time a graph calls a Keras Sequential
  with a new input shape, Keras calls every layer once more, in a scratch graph of its own inside
  that one, to infer the network's shapes; those calls draw too, but are no part of the step."""
  recorder = _DrawRecorder(graph)
  token = _draw_plan.set(recorder)
  try:
    yield recorder.requests
  finally:
    _draw_plan.reset(token)


@contextlib.contextmanager
def supplied_draws(requests: Sequence[DrawRequest], draws: Sequence[tf.Tensor]) -> Iterator[None]:
  """Inside the block, layers' draws are answered, in order, by `draws` (one step's rows of the
  draws made ahead for `requests`); a step that asks for anything else is refused."""
  supplier = _DrawSupplier(requests, draws)
  token = _draw_plan.set(supplier)
  try:
    yield
  finally:
    _draw_plan.reset(token)
  if supplier.pending:
    raise ValueError(f"the step used {len(requests) - len(supplier.pending)} of "
                     f"{len(requests)} recorded draws: it must draw the same every step")


def _default_add_weight(name, shape, dtype, initializer, trainable,
                        aggregation=tf.VariableAggregation.NONE):
  return tf.Variable(initializer(shape, dtype), name=name, trainable=trainable,
                     aggregation=aggregation)


class MemberNoise(tf.Module):
  """Standard-normal and sign noise with an independent row per member.

  Every draw is one stateless (counter-based) op over all `total_members`
  rows, seeded by (seed, counter); the layer keeps the rows
  [member_offset, member_offset + num_members). So a run that computes M
  members together and M runs that each compute one member (`num_members=1`,
  `member_offset=m`) see exactly the same numbers: that is what lets a test
  check that vectorised refinement equals one-at-a-time refinement. With
  `num_members=None` there is no member axis.

  Per-example draws (`per_example=True`, batch axis first in `shape`) are
  made for the global batch and cut to this replica's rows
  (`auxiliary_sampling.batch_shards`); the counter advances once per draw
  whatever the number of replicas, so every replica sees the same numbers.
  """

  def __init__(self, num_members: Optional[int], total_members: Optional[int] = None,
               member_offset: int = 0, add_weight: Optional[AddWeight] = None, name: str = "noise",
               initial_seed: Optional[int] = None):
    super().__init__(name=name)
    add_weight = add_weight or _default_add_weight
    self.num_members = num_members
    window = 1 if num_members is None else num_members
    self.total_members = window if total_members is None else int(total_members)
    self.member_offset = int(member_offset)
    if self.member_offset < 0 or self.member_offset + window > self.total_members:
      raise ValueError(
          f"member window [{self.member_offset}, {self.member_offset + window}) does not "
          f"fit in {self.total_members} members")
    initial_seed = np.int64(np.random.randint(0, 2**31 - 1) if initial_seed is None
                            else initial_seed)
    self.seed = add_weight(
        name=f"{name}_seed", shape=[], dtype=tf.int64,
        initializer=lambda shape, dtype=None, **_: tf.constant(initial_seed, tf.int64),
        trainable=False)
    self.counter = add_weight(
        name=f"{name}_counter", shape=[], dtype=tf.int64,
        initializer=lambda shape, dtype=None, **_: tf.zeros(shape, tf.int64), trainable=False,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def set_seed(self, seed: int) -> None:
    """Restarts the stream from `seed`."""
    self.seed.assign(int(seed))
    self.counter.assign(0)

  def _draw(self, kind: str, dtype, shape, per_example: bool) -> tf.Tensor:
    shape = tf.cast(shape, tf.int32)
    drawn_shape = global_rows(shape) if per_example else shape
    if self.num_members is not None:
      drawn_shape = tf.concat([[self.total_members], drawn_shape], 0)
    plan = _draw_plan.get()
    if plan is not None:
      static_shape = list(_static_shape(shape))
      if per_example:
        static_shape[0] *= shard_count()
      if self.num_members is not None:
        static_shape = [self.total_members] + static_shape
      draws = plan.take(DrawRequest(self, kind, tuple(static_shape), tf.as_dtype(dtype)))
    else:
      draws = _SAMPLERS[kind](drawn_shape, tf.stack([self.seed, self.counter.assign_add(1)]),
                              dtype)
    if self.num_members is not None and self.total_members != self.num_members:
      draws = draws[self.member_offset:self.member_offset + self.num_members]
    if per_example:
      draws = local_rows(draws, batch_axis=0 if self.num_members is None else 1,
                         local_shape=shape)
    return draws

  def normal(self, shape, dtype=tf.float32, per_example: bool = False) -> tf.Tensor:
    """N(0, 1) draws of shape [num_members] + shape (no member axis if None), by Box-Muller.

    `per_example`: `shape` starts with the batch axis, one independent row per example.
    """
    return self._draw("normal", dtype, shape, per_example)

  def sign(self, shape, dtype=tf.float32, per_example: bool = False) -> tf.Tensor:
    """Uniform random signs (+1/-1), as Flipout uses."""
    return self._draw("sign", dtype, shape, per_example)

  def set_member_window(self, total_members: int, member_offset: int) -> None:
    """Makes this stream the rows [member_offset, +num_members) of a `total_members` run."""
    window = 1 if self.num_members is None else self.num_members
    if member_offset < 0 or member_offset + window > total_members:
      raise ValueError(f"member window [{member_offset}, {member_offset + window}) does not fit in "
                       f"{total_members} members")
    self.total_members, self.member_offset = int(total_members), int(member_offset)
