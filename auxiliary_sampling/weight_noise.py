"""How mean-field layers draw their weight noise: per example, or once per member and batch.

per_example: independent noise for every example (local reparameterisation
for dense layers, Flipout for convolutions); the default, and what every ELBO
estimate uses. per_batch: one weight draw per member, shared by the batch
(cheaper, noisier gradients of the same objective).

A mean-field layer takes the mode as its call argument `weight_noise`. Keras
containers (Sequential, LayerChain) pass only `training` and `mask` down, so
layers called without the argument take the mode of the innermost
`weight_noise_scope`, per_example outside any. No layer stores a mode. The
mode is read when the call runs, so a `tf.function` keeps the mode it was
traced with.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

WEIGHT_NOISE = ("per_example", "per_batch")

_scoped_mode = contextvars.ContextVar("weight_noise", default="per_example")


def check_weight_noise(mode: str) -> str:
  """`mode` if it is one of WEIGHT_NOISE, else ValueError."""
  if mode not in WEIGHT_NOISE:
    raise ValueError(f"unknown weight_noise {mode!r}; allowed: {', '.join(WEIGHT_NOISE)}")
  return mode


@contextlib.contextmanager
def weight_noise_scope(mode: str) -> Iterator[None]:
  """Layer calls inside the block that are not given a mode draw noise `mode`-wise."""
  token = _scoped_mode.set(check_weight_noise(mode))
  try:
    yield
  finally:
    _scoped_mode.reset(token)


def resolve_weight_noise(mode: Optional[str]) -> str:
  """A layer call's mode: its own argument if given, else the enclosing scope's."""
  return _scoped_mode.get() if mode is None else check_weight_noise(mode)
