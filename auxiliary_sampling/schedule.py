"""Prior variances of the additive auxiliary variables and the refinement learning rates.

The weights are written as w = a_1 + ... + a_K + r (paper Eq. 3), where the
a_k are sampled one by one and r is the residual that the last conditional
posterior q_K(w) still describes. Variances are stored as fractions of the
prior variance sigma_w^2, so one schedule serves every weight tensor whatever
its (empirical-Bayes) prior scale.

Learning rates: the paper's rule is 1e-3 times the standard deviation of the
conditional prior p(w | a_1..k). `authors_code` follows google/edward2's
experimental/auxiliary_sampling/run_training.py: right after drawing auxiliary
variable j = 0..K-1 it compiles Adam with 1e-5 * sqrt(1 - ratio)**j, so stage k
(1-based) gets 1e-5 * sqrt(1 - ratio)^(k-1), the scale of the prior a_k came
from. That code then fits for (batch_size * auxiliary_sampling_frequency) // N
= (256 * 100) // N epochs of ceil(N / 256) steps each, N the training-set size,
not for 100 steps: with their 80 % UCI split that is 63 * 2 = 126 Adam steps on
Boston (N = 404), 104 * 1 = 104 on yacht (N = 246) and none at all on protein
(N = 36,584), MNIST (60,000) and CIFAR-10 (50,000), where their refinement only
drew the a_k. (The first, ICML-submission commit cf79e30 rounded the epochs up
with math.ceil instead: 128, 105, 143, 235 and 196 steps.)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from common.validation import check_integer

LEARNING_RATE_RULES = ("paper", "authors_code")
# The paper's refinement (Section 4.1): K = 5 auxiliary variables, each taking 0.7 of the
# remaining prior variance, T = 200 Adam steps after each.
PAPER_NUM_AUXILIARY, PAPER_VARIANCE_RATIO, PAPER_STEPS_PER_AUXILIARY = 5, 0.7, 200

# Each rule's base learning rate, and how many stages back it takes the conditional prior whose
# standard deviation scales it: the paper's p(w | a_1..k), the authors' code's p(w | a_1..k-1).
_LEARNING_RATE_RULES = {"paper": (1e-3, 0), "authors_code": (1e-5, 1)}


@dataclasses.dataclass(frozen=True)
class AuxiliarySchedule:
  """Prior variances sigma_ak^2 / sigma_w^2 of the auxiliary variables a_1..a_K.

  `ratio` is set for a geometric schedule (Section 4.1): its remaining fractions are then the
  products (1 - ratio)^k, free of the cancellation in 1 - sum_{l<=k} sigma_al^2 / sigma_w^2.
  """

  variance_fractions: tuple[float, ...]
  ratio: Optional[float] = None

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
    if self.ratio is not None:
      ratio = float(self.ratio)
      object.__setattr__(self, "ratio", ratio)
      series = [ratio * (1.0 - ratio) ** (k - 1) for k in range(1, len(fractions) + 1)]
      if not (0.0 < ratio < 1.0 and all(map(math.isclose, fractions, series))):
        raise ValueError(f"auxiliary variance fractions {list(fractions)} are not the geometric "
                         f"series of ratio {ratio!r}, ratio * (1 - ratio)^(k-1)")
    # The remainder without cancellation: the rounded sum can reach 1 although the fractions
    # leave a residual (1 - 1e-18 for ratio 1 - 1e-9 and K = 2).
    if not self.remaining_fraction(len(fractions)) > 0.0:
      raise ValueError(
          f"auxiliary variance fractions {list(fractions)} sum to {math.fsum(fractions):.6g}; "
          "they must sum below 1 (below sigma_w^2) so that w keeps a residual")

  @classmethod
  def geometric(cls, ratio: float, num_auxiliary: int) -> "AuxiliarySchedule":
    """sigma_ak^2 = ratio * (sigma_w^2 - sum_{l<k} sigma_al^2) (paper Section 4.1)."""
    num_auxiliary = check_integer("number of auxiliary variables K", num_auxiliary)
    if not (isinstance(ratio, (int, float)) and 0.0 < ratio < 1.0):
      raise ValueError(f"auxiliary variance ratio {ratio!r} must lie in the open interval (0, 1)")
    fractions = tuple(ratio * (1.0 - ratio) ** (k - 1) for k in range(1, num_auxiliary + 1))
    return cls(fractions, ratio=ratio)

  @classmethod
  def explicit(cls, variance_fractions: Sequence[float]) -> "AuxiliarySchedule":
    """A schedule from a list of sigma_ak^2 / sigma_w^2 values."""
    return cls(tuple(variance_fractions))

  @property
  def num_auxiliary(self) -> int:
    return len(self.variance_fractions)

  def remaining_fraction(self, k: int) -> float:
    """Variance fraction of p(w | a_1..k): 1 - sum_{l<=k} sigma_al^2 / sigma_w^2, the prior
    variance of a_k+1 + ... + a_K + r in Eq. 3.

    Without cancellation, so a float32 model receives it to half an ulp: (1 - ratio)^k for a
    geometric schedule, else the exact float64 remainder rounded once.
    """
    if not 0 <= k <= self.num_auxiliary:
      raise ValueError(f"step k={k} is outside 0..{self.num_auxiliary}")
    if self.ratio is not None:
      return (1.0 - self.ratio) ** k
    return _exact_remainder(self.variance_fractions[:k])

  def check_dtype(self, dtype) -> None:
    """Raises a one-line ValueError if a model of float type `dtype` cannot hold the schedule.

    Every fraction and remaining fraction must be a normal number of `dtype` (else it rounds to
    0 or loses its relative precision), and each fraction must round below the remaining
    fraction it is taken from, else a_k would take all of p(w | a_1..k-1)'s variance.
    """
    dtype = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    finfo, name = np.finfo(dtype), dtype.name
    tiny = float(finfo.tiny)
    if self.ratio is None:
      what = f"auxiliary variance fractions {list(self.variance_fractions)}"
    else:
      what = f"auxiliary variance ratio {self.ratio!r} with K={self.num_auxiliary}"
    for k, fraction in enumerate(self.variance_fractions, start=1):
      before, after = self.remaining_fraction(k - 1), self.remaining_fraction(k)
      if fraction < tiny:
        raise ValueError(
            f"{what}: fraction {fraction!r} (k={k}) is below {name}'s smallest normal number "
            f"{tiny:.3g}; allowed: fractions of sigma_w^2 from {tiny:.3g} up")
      if after < tiny:
        raise ValueError(
            f"{what}: the remaining fraction {after:.3g} after k={k} is below {name}'s smallest "
            f"normal number {tiny:.3g}; allowed: schedules that leave at least that much of "
            "sigma_w^2 (a smaller ratio or fewer auxiliary variables)")
      if not dtype.type(fraction) < dtype.type(before):
        hint = "" if self.ratio is None else (
            f", for a geometric schedule a ratio below 1 - {float(finfo.epsneg) / 2:.2g}")
        raise ValueError(
            f"{what}: fraction {fraction!r} (k={k}) rounds to the remaining fraction "
            f"{float(dtype.type(before)):.9g} it is taken from in {name}, leaving p(w | a_1..k) "
            f"no variance; allowed: fractions that stay below it in {name}{hint}")

  def learning_rates(self, rule: str = "paper") -> list[float]:
    """Adam learning rate of each refinement step k = 1..K (see the module docstring).

    'paper': 1e-3 * sqrt(1 - sum_{l<=k} sigma_al^2 / sigma_w^2), i.e. 1e-3 * 0.3^(k/2) for the
    geometric ratio 0.7; 'authors_code': 1e-5 * sqrt(1 - sum_{l<k} sigma_al^2 / sigma_w^2), i.e.
    1e-5 * 0.3^((k-1)/2). The sum stays in float64, where its cancellation is harmless for a
    learning rate, so the paper rule's rates are bit-identical to the committed runs'.
    """
    if rule not in _LEARNING_RATE_RULES:
      raise ValueError(
          f"unknown learning-rate rule {rule!r}; allowed: {', '.join(LEARNING_RATE_RULES)}")
    base, stages_back = _LEARNING_RATE_RULES[rule]
    fractions = self.variance_fractions
    return [base * math.sqrt(1.0 - sum(fractions[:k - stages_back]))
            for k in range(1, self.num_auxiliary + 1)]


def _exact_remainder(fractions: Sequence[float]) -> float:
  """1 - sum(fractions), computed exactly and rounded once to float64."""
  return math.fsum((1.0, *(-fraction for fraction in fractions)))
