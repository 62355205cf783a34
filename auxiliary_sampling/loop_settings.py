"""How a `TrainingLoop` runs: noise drawn inside each step, or ahead of it in chunks for an
XLA-compiled step body.

With `noise_chunk_steps=C > 0` every random number a chunk of C steps needs
(batch indices, each layer's weight noise) is drawn before the chunk, in one
stateless op per stream, and the steps take their rows; with `jit_compile`
the chunk of steps then runs as one XLA computation. XLA's own random ops and
transcendentals are slow on CPUs, so the noise must come from outside it
(`benchmarks.step_floor`). Drawing ahead changes which numbers a step sees
(one counter per chunk instead of one per step), not their distribution; the
XLA and the plain chunk see the same numbers and agree to round-off.

Binaries build the settings from their flags (`methods.loop_settings.loop_settings_of`) and pass
them to every trainer, which hands them to its `TrainingLoop`.
"""
from __future__ import annotations

import dataclasses

MAX_NOISE_CHUNK_STEPS = 10_000


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """`jit_compile`: compile each chunk of steps with XLA (needs `noise_chunk_steps` > 0 and one
  replica); `noise_chunk_steps`: steps whose noise is drawn together ahead of them (0: each step
  draws its own, inside it); `compile_refinement`: with `jit_compile`, refinement's loops
  compile too (each compiles once, for seconds on a CPU: more than a short refinement saves);
  `compile_ensemble`: with `jit_compile`, the deep ensemble's loop compiles too (its members'
  batched products of small networks run slower under XLA on a CPU)."""
  jit_compile: bool = False
  noise_chunk_steps: int = 0
  compile_refinement: bool = True
  compile_ensemble: bool = True

  def for_refinement(self) -> "LoopSettings":
    """The settings refinement's loop runs under: the same chunks, compiled or not."""
    return dataclasses.replace(self, jit_compile=self.jit_compile and self.compile_refinement)

  def for_ensemble(self) -> "LoopSettings":
    """The settings the deep ensemble's loop runs under: the same chunks, compiled or not."""
    return dataclasses.replace(self, jit_compile=self.jit_compile and self.compile_ensemble)

  def __post_init__(self):
    if not 0 <= self.noise_chunk_steps <= MAX_NOISE_CHUNK_STEPS:
      raise ValueError(f"noise_chunk_steps={self.noise_chunk_steps} is out of range; allowed: "
                       f"0 (draw inside each step) to {MAX_NOISE_CHUNK_STEPS}")
    if self.jit_compile and not self.noise_chunk_steps:
      raise ValueError("jit_compile needs the noise drawn ahead of the compiled steps; allowed: "
                       "noise_chunk_steps > 0 with it")
