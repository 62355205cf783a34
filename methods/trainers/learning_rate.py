"""Adam learning rates over a run's steps: a constant, or piecewise constant (ResNet-20's epochs).

No TensorFlow here: a benchmark's config builds its schedule before TensorFlow loads.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional


def steps_in(epochs: float, steps_per_epoch: float) -> int:
  """The steps that cover `epochs` epochs: the ceiling, after rounding away float error
  (153.6 epochs of 195.3125 steps are exactly 30,000)."""
  return math.ceil(round(epochs * steps_per_epoch, 6))


@dataclasses.dataclass(frozen=True)
class LearningRateSchedule:
  """A piecewise-constant Adam learning rate: `base`, times `factors[i]` from step `boundaries[i]`.

  Steps count from 0; the rate of step s is that of the last boundary <= s.
  ResNet-20's epoch schedule (x0.1 after epoch 80, ...) is one, in steps.
  """

  base: float
  boundaries: tuple[int, ...] = ()
  factors: tuple[float, ...] = ()

  def __post_init__(self):
    if not self.base > 0 or any(not f > 0 for f in self.factors):
      raise ValueError(f"learning rate {self.base!r} and factors {self.factors} must be > 0")
    if len(self.boundaries) != len(self.factors):
      raise ValueError(f"{len(self.boundaries)} boundaries but {len(self.factors)} factors")
    if any(b <= a for a, b in zip((0,) + self.boundaries, self.boundaries)):
      raise ValueError(f"boundaries {self.boundaries} must be increasing steps > 0")

  def rate(self, step: int) -> float:
    """The learning rate of step `step`."""
    factor = 1.0
    for boundary, boundary_factor in zip(self.boundaries, self.factors):
      if step >= boundary:
        factor = boundary_factor
    return self.base * factor

  def steps_at_this_rate(self, step: int) -> Optional[int]:
    """How many steps from `step` keep its rate (None: all the rest)."""
    later = [boundary for boundary in self.boundaries if boundary > step]
    return later[0] - step if later else None

  @classmethod
  def from_epochs(cls, base: float, epochs: tuple[float, ...], factors: tuple[float, ...],
                  steps_per_epoch: float) -> "LearningRateSchedule":
    """Factors that start after the given epochs, at the first step whose start is at or past
    each; later epochs than the run has are harmless (their boundaries are never reached)."""
    if not steps_per_epoch > 0:
      raise ValueError(f"steps_per_epoch={steps_per_epoch!r} must be > 0")
    return cls(base, tuple(max(1, steps_in(epoch, steps_per_epoch)) for epoch in epochs),
               tuple(factors))
