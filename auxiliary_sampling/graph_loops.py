"""Compiled loops written as graph ops, so that their functions need no AutoGraph conversion.

AutoGraph rewrites every Python function a `tf.function` calls (the layers, the
noise, the likelihoods) before tracing it; for the UCI network that conversion
took longer than tracing itself, about 3 of the 23 seconds of a whole Boston run.
The library's loops are `tf.while_loop`s written out, and its functions are
traced with `autograph=False` (`graph_function`), the layers' `call`s too
(`no_autograph`): the code they run has no Python control flow over tensors,
which tracing would reject with an error.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional, Sequence

import tensorflow as tf


def no_autograph(call: Callable) -> Callable:
  """A Keras layer's `call`, which Keras then traces as written instead of converting it first;
  its signature stays visible, so Keras still passes `training` only where it is accepted."""
  wrapped = tf.autograph.experimental.do_not_convert(call)
  wrapped.__signature__ = inspect.signature(call)
  return wrapped


def graph_function(func: Optional[Callable] = None, **options):
  """`tf.function(func, **options)` without AutoGraph, also for the Keras layers it calls (which
  convert their `call` unless the caller disabled conversion). Usable as `@graph_function` and
  `@graph_function(jit_compile=True)`."""
  if func is None:
    return functools.partial(graph_function, **options)
  return tf.function(tf.autograph.experimental.do_not_convert(func), autograph=False, **options)


def counted_loop(num_iterations, body: Callable[..., Sequence], initial: Sequence) -> tuple:
  """Runs state = body(i, *state) for i = 0 .. num_iterations - 1 as one `tf.while_loop`;
  returns the final state (a tuple). `num_iterations` may be a tensor."""
  limit = tf.cast(num_iterations, tf.int32)

  def step(index, *state):
    return (index + 1, *body(index, *state))
  _, *final = tf.while_loop(lambda index, *_: index < limit, step,
                            (tf.constant(0, tf.int32), *initial))
  return tuple(final)
