"""Prior variances of the additive auxiliary variables and the refinement learning rates.

The weights are written as w = a_1 + ... + a_K + r (paper Eq. 3), where the
a_k are sampled one by one and r is the residual that the last conditional
posterior q_K(w) still describes. Variances are stored as fractions of the
prior variance sigma_w^2, so one schedule serves every weight tensor whatever
its (empirical-Bayes) prior scale.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from auxiliary_sampling.validation import check_integer

LEARNING_RATE_RULES = ("paper", "authors_code")

# Base learning rates of the two rules; both scale with the conditional prior's
# standard deviation, sqrt(remaining variance fraction).
_BASE_LEARNING_RATE = {"paper": 1e-3, "authors_code": 1e-5}


@dataclasses.dataclass(frozen=True)
class AuxiliarySchedule:
  """Prior variances sigma_ak^2 / sigma_w^2 of the auxiliary variables a_1..a_K."""

  variance_fractions: tuple[float, ...]

  def __post_init__(self):
    fractions = tuple(float(f) for f in self.variance_fractions)
    object.__setattr__(self, "variance_fractions", fractions)
    if not fractions:
      raise ValueError("auxiliary schedule needs K >= 1 variances, got an empty list")
    for k, fraction in enumerate(fractions, start=1):
      if not (math.isfinite(fraction) and fraction > 0.0):
        raise ValueError(
            f"auxiliary variance fraction {fraction!r} (k={k}) must be a finite "
            "number > 0 (it is sigma_ak^2 / sigma_w^2)")
    total = sum(fractions)
    if not total < 1.0:
      raise ValueError(
          f"auxiliary variance fractions {list(fractions)} sum to {total:.6g}; "
          "they must sum below 1 (below sigma_w^2) so that w keeps a residual")

  @classmethod
  def geometric(cls, ratio: float, num_auxiliary: int) -> "AuxiliarySchedule":
    """sigma_ak^2 = ratio * (sigma_w^2 - sum_{l<k} sigma_al^2) (paper Section 4.1)."""
    num_auxiliary = check_integer("number of auxiliary variables K", num_auxiliary)
    if not (isinstance(ratio, (int, float)) and 0.0 < ratio < 1.0):
      raise ValueError(f"auxiliary variance ratio {ratio!r} must lie in the open interval (0, 1)")
    return cls(tuple(ratio * (1.0 - ratio) ** (k - 1) for k in range(1, num_auxiliary + 1)))

  @classmethod
  def explicit(cls, variance_fractions: Sequence[float]) -> "AuxiliarySchedule":
    """A schedule from a list of sigma_ak^2 / sigma_w^2 values."""
    return cls(tuple(variance_fractions))

  @property
  def num_auxiliary(self) -> int:
    return len(self.variance_fractions)

  def remaining_fraction(self, k: int) -> float:
    """Variance fraction of p(w | a_1..k): 1 - sum_{l<=k} sigma_al^2 / sigma_w^2."""
    if not 0 <= k <= self.num_auxiliary:
      raise ValueError(f"step k={k} is outside 0..{self.num_auxiliary}")
    return 1.0 - sum(self.variance_fractions[:k])

  def learning_rates(self, rule: str = "paper") -> list[float]:
    """Adam learning rate of each refinement step k = 1..K.

    Proportional to the conditional prior's standard deviation, as the paper
    prescribes (lr = 1e-3 * 0.3^(k/2) for the geometric ratio 0.7); the
    authors' public code used the same form with base 1e-5.
    """
    if rule not in _BASE_LEARNING_RATE:
      raise ValueError(f"unknown learning-rate rule {rule!r}; allowed: {', '.join(LEARNING_RATE_RULES)}")
    base = _BASE_LEARNING_RATE[rule]
    return [base * math.sqrt(self.remaining_fraction(k)) for k in range(1, self.num_auxiliary + 1)]
