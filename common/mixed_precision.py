"""bfloat16 networks: Keras's mixed_bfloat16 policy while a network is built.

A layer built under the policy keeps float32 variables and computes in
bfloat16 (TPUs' native type; on recent GPUs and CPUs too): inputs and
variables are cast as the layer reads them, and gradients flow back to the
float32 variables. Everything outside the layers' calls stays float32: the
KL terms, the likelihood (logits are cast back first), the ELBO sums over the
data, Adam and refinement's conditioning.
"""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def network_precision(use_bfloat16: bool) -> Iterator[None]:
  """Layers built inside compute in bfloat16 if `use_bfloat16`, else as the global policy says."""
  if not use_bfloat16:
    yield
    return
  from tf_keras import mixed_precision
  previous = mixed_precision.global_policy()
  mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    yield
  finally:
    mixed_precision.set_global_policy(previous)
