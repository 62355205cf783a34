"""vogn: the mean-field posterior fitted by VOGN (Osawa et al. 2019), M posterior draws predict.

Also VOGN's settings (`VognConfig`), which refined_vogn extends.
"""
from __future__ import annotations

import dataclasses

from methods.trainers.vogn_settings import CURVATURES, PRIORS, VognSettings
from common.config import setting
from methods import network_kinds
from methods.registry import VOGN, Method, MethodRun, TrainingInputs
from methods.vi import MeanFieldConfig


@dataclasses.dataclass
class VognConfig(MeanFieldConfig):
  """VOGN's settings (Osawa et al. 2019, Algorithm 1); it trains for --vi_steps steps."""

  vogn_learning_rate: float = setting(
      1e-2, "vogn, refined_vogn: alpha, VOGN's step size (and Adam's for point estimates such as "
      "a noise scale).", above=0, maximum=1.0, shapes=(VOGN,))
  vogn_momentum: float = setting(0.9, "VOGN: beta_1, momentum of the mean's update.", minimum=0,
                                 below=1, shapes=(VOGN,))
  vogn_curvature_decay: float = setting(
      0.999, "VOGN: beta_2, decay of the curvature estimate s.", minimum=0, below=1,
      shapes=(VOGN,))
  vogn_prior: str = setting(
      "fixed", "VOGN's prior: fixed (Algorithm 1's N(0, 1/delta)) or empirical_bayes (each "
      "weight tensor's prior variance moved after every step towards mean(mu^2 + sigma^2) over "
      "the tensor, its closed-form optimum, at --vogn_prior_decay; VI learns the same scale by "
      "gradient).", choices=PRIORS, shapes=(VOGN,))
  vogn_prior_decay: float = setting(
      0.999, "VOGN with --vogn_prior=empirical_bayes: v <- decay v + (1 - decay) mean(mu^2 + "
      "sigma^2) per step. 0 jumps to the optimum at every step, which pins zero-initialised "
      "biases at zero.", minimum=0, below=1,
      absent_means=0.0, shapes=(VOGN,), only_when=("vogn_prior", "empirical_bayes"))
  vogn_prior_precision: float = setting(
      1.0, "VOGN: delta, precision of the prior N(0, 1/delta) of every weight (with "
      "--vogn_prior=empirical_bayes, the initial one); refined_vogn refines against VOGN's final "
      "prior.", above=0, maximum=1e6, shapes=(VOGN,))
  vogn_tempering: float = setting(
      1.0, "VOGN: tau, the KL's weight in the objective (1: the ELBO; < 1: a colder posterior).",
      above=0, maximum=10.0, shapes=(VOGN,))
  vogn_damping: float = setting(0.0, "VOGN: gamma, external damping of the mean's step.",
                                minimum=0, maximum=1e6, shapes=(VOGN,))
  vogn_mc_samples: int = setting(1, "VOGN: weight draws per step.", minimum=1, maximum=64,
                                 shapes=(VOGN,))
  vogn_curvature: str = setting(
      "squared_gradients",
      "VOGN's curvature: squared_gradients (per-example squared gradients, Osawa et al.'s "
      "Algorithm 1) or gauss_newton (the generalised Gauss-Newton diagonal).", choices=CURVATURES,
      shapes=(VOGN,))

  def vogn_settings(self) -> VognSettings:
    """VOGN's hyperparameters from the flags."""
    return VognSettings(momentum=self.vogn_momentum, curvature_decay=self.vogn_curvature_decay,
                        tempering=self.vogn_tempering, damping=self.vogn_damping,
                        mc_samples=self.vogn_mc_samples, curvature=self.vogn_curvature,
                        prior=self.vogn_prior, prior_decay=self.vogn_prior_decay)

  def mean_field_prior(self) -> tuple[float, bool]:
    """(initial prior scale, whether Adam learns it): VOGN's N(0, 1/delta), which VOGN itself
    keeps or moves (--vogn_prior)."""
    return self.vogn_prior_precision ** -0.5, False


def train(run: TrainingInputs) -> MethodRun:
  """Fits the mean-field posterior by VOGN (or resumes it), then predicts with M draws."""
  from methods.trainers.vi_family import PREDICT, train_mean_field_method  # TensorFlow loads here
  return train_mean_field_method(run, fit=VOGN, then=PREDICT)


METHOD = Method(
    name="vogn", title="VOGN", config=VognConfig, needs=(network_kinds.MEAN_FIELD,), train=train,
    order=6, summary="the mean-field posterior fitted by VOGN (Osawa et al. 2019)",
    takes_input_transform=False, takes_penalty=False)
