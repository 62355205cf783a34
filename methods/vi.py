"""vi: mean-field variational inference, M posterior draws in the predictive (paper Eq. 4).

Also the settings every mean-field method shares (`MeanFieldConfig`) and VI's own (`ViConfig`),
which refined_vi and vi_equal_compute extend.
"""
from __future__ import annotations

import dataclasses

from auxiliary_sampling.weight_noise import WEIGHT_NOISE
from methods.trainers.trainer_options import VI_OPTIMIZERS
from common.config import RESULTS, Config, UsageError, setting
from methods import network_kinds, registry
from methods.registry import EXTRA_VI, VI, Method, MethodRun, TrainingInputs


@dataclasses.dataclass
class MeanFieldConfig(Config):
  """Settings of every method that fits a mean-field Gaussian posterior (by VI or VOGN)."""

  vi_steps: int = setting(30_000, "Adam steps of mean-field VI.", minimum=1, shapes=(EXTRA_VI,))
  elbo_num_samples: int = setting(10, "Posterior draws per example in the whole-training-set ELBO.",
                                  minimum=1, shapes=RESULTS)


@dataclasses.dataclass
class ViConfig(MeanFieldConfig):
  """Settings of mean-field VI (the paper's Adam on the ELBO, or another optimiser)."""

  empirical_bayes_prior: bool = setting(
      True, "Learn one prior scale per weight tensor (else a fixed N(0, 1) prior).",
      shapes=(VI, EXTRA_VI))
  vi_optimizer: str = setting(
      "adam", "VI's optimiser: adam (the paper's), momentum (SGD with --vi_momentum) or misso "
      "(incremental quadratic surrogates, methods.trainers.misso; --learning_rate is its "
      "1/(2 gamma)).",
      choices=VI_OPTIMIZERS, shapes=(VI, EXTRA_VI))
  vi_momentum: float = setting(0.9, "--vi_optimizer=momentum: the velocity's decay.", minimum=0,
                               below=1, shapes=(VI, EXTRA_VI))
  vi_weight_noise: str = setting(
      "per_example", "VI's weight noise: per_example (local reparameterisation, Flipout) or "
      "per_batch (one weight draw per step: Bayes by backprop's estimator).",
      choices=WEIGHT_NOISE, shapes=(VI, EXTRA_VI))

  def mean_field_prior(self) -> tuple[float, bool]:
    """(initial prior scale, whether Adam learns it): N(0, 1), learned by empirical Bayes if
    --empirical_bayes_prior."""
    return 1.0, self.empirical_bayes_prior

  def check_replicas(self, num_replicas: int) -> None:
    super().check_replicas(num_replicas)
    if (self.vi_optimizer == "misso" and registry.trains_with(self, ViConfig)
        and num_replicas > 1):
      raise UsageError(f"--vi_optimizer=misso keeps its surrogates on one device, but the "
                       f"strategy has {num_replicas} replicas; allowed: one device "
                       "(--num_cores=1)")


def train(run: TrainingInputs) -> MethodRun:
  """Fits VI (or resumes it), then predicts with M posterior draws."""
  from methods.trainers.vi_family import PREDICT, train_mean_field_method  # TensorFlow loads here
  return train_mean_field_method(run, fit=VI, then=PREDICT)


METHOD = Method(
    name="vi", title="VI", config=ViConfig, needs=(network_kinds.MEAN_FIELD,), train=train, order=1,
    summary="mean-field VI; M posterior draws predict")
