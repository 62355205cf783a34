"""VOGN's hyperparameters (Osawa et al. 2019, Algorithm 1), checked without TensorFlow so that
the binaries refuse bad flags before it loads (`methods.trainers.vogn` uses them)."""
from __future__ import annotations

import dataclasses

CURVATURES = ("squared_gradients", "gauss_newton")
# VOGN's prior: Algorithm 1's fixed N(0, 1/delta), or one variance per weight tensor moved after
# every step towards its empirical-Bayes optimum (the scale VI learns by gradient).
PRIORS = ("fixed", "empirical_bayes")


@dataclasses.dataclass(frozen=True)
class VognSettings:
  """VOGN's hyperparameters (Osawa et al. 2019, Algorithm 1); alpha is the trainer's rate."""

  momentum: float = 0.9            # beta_1
  curvature_decay: float = 0.999   # beta_2
  tempering: float = 1.0           # tau, the KL's weight (1: the ELBO)
  damping: float = 0.0             # gamma, external damping of the mean's step
  mc_samples: int = 1              # weight draws per step
  curvature: str = "squared_gradients"
  prior: str = "fixed"
  prior_decay: float = 0.999       # empirical_bayes: v <- d v + (1 - d) mean(mu^2 + sigma^2)

  def __post_init__(self):
    checks = ((0 <= self.momentum < 1, "momentum", "in [0, 1)"),
              (0 <= self.curvature_decay < 1, "curvature_decay", "in [0, 1)"),
              (self.tempering > 0, "tempering", "> 0"), (self.damping >= 0, "damping", ">= 0"),
              (isinstance(self.mc_samples, int) and self.mc_samples >= 1, "mc_samples",
               "an integer >= 1"),
              (self.curvature in CURVATURES, "curvature", f"one of {', '.join(CURVATURES)}"),
              (self.prior in PRIORS, "prior", f"one of {', '.join(PRIORS)}"),
              (0 <= self.prior_decay < 1, "prior_decay", "in [0, 1)"))
    for holds, name, allowed in checks:
      if not holds:
        raise ValueError(f"VOGN {name}={getattr(self, name)!r} is not allowed; allowed: {allowed}")
