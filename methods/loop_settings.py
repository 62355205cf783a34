"""The library's training-loop settings from a run's flags: the methods and the bandit hand them
to their trainers. It sits above the library, whose `LoopSettings` it builds, so that common/
(which declares the flags, `common.distribution.DeviceConfig`) need not import the library."""
from __future__ import annotations

from auxiliary_sampling.loop_settings import LoopSettings
from common.config import Config


def loop_settings_of(config: Config) -> LoopSettings:
  """The training-loop settings of a config that declares --jit_compile and --noise_chunk_steps
  (the defaults for one that does not): what a binary passes to its trainers."""
  if not hasattr(config, "noise_chunk_steps"):
    return LoopSettings()
  return LoopSettings(jit_compile=config.jit_compile, noise_chunk_steps=config.noise_chunk_steps,
                      compile_refinement=getattr(config, "jit_compile_refinement", True),
                      compile_ensemble=getattr(config, "jit_compile_ensemble", True))
