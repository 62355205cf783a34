"""fsvgd: a particle posterior by SVGD on the networks' function values (f-SVGD, Wang et al.
2019, Eq. 3-4), with a Gaussian function-space prior moment-matched to prior network draws."""
from __future__ import annotations

import dataclasses

from common.config import UsageError, setting
from methods import network_kinds
from methods.registry import PARTICLES, Method, MethodRun, TrainingInputs
from methods.svgd import ParticleConfig, train_particle_method


@dataclasses.dataclass
class FsvgdConfig(ParticleConfig):
  """Settings of f-SVGD: the particles' and the function-space prior's."""

  fsvgd_prior_draws: int = setting(
      40, "fsvgd: prior networks drawn per step for the Gaussian function-space prior.",
      minimum=2, maximum=10_000, shapes=(PARTICLES,))
  fsvgd_prior_points: int = setting(
      4, "fsvgd: points of the function-space prior term per step, half from the batch and half "
      "from the extra batch.", minimum=1, maximum=1000, shapes=(PARTICLES,))
  fsvgd_extra_batch: int = setting(
      100, "fsvgd: perturbed training inputs added to each step's function-value points.",
      minimum=1, shapes=(PARTICLES,))
  fsvgd_kde_scale: float = setting(
      1.0, "fsvgd: the extra inputs' perturbation std is this / sqrt(N * input dims).", minimum=0,
      maximum=100.0, shapes=(PARTICLES,))

  def check(self) -> None:
    """The extra batch must hold its half of the prior points."""
    super().check()
    in_extra_batch = self.fsvgd_prior_points - self.fsvgd_prior_points // 2
    if self.method == "fsvgd" and self.fsvgd_extra_batch < in_extra_batch:
      raise UsageError(f"--fsvgd_extra_batch={self.fsvgd_extra_batch} cannot hold the "
                       f"{in_extra_batch} prior points of --fsvgd_prior_points="
                       f"{self.fsvgd_prior_points}; allowed: >= {in_extra_batch}")


def train(run: TrainingInputs) -> MethodRun:
  """Moves the particles by SVGD on their function values."""
  from methods.trainers.particles import FunctionSpaceSettings  # TensorFlow loads here
  config = run.config
  settings = FunctionSpaceSettings(prior_draws=config.fsvgd_prior_draws,
                                   prior_points=config.fsvgd_prior_points,
                                   extra_batch=config.fsvgd_extra_batch,
                                   kde_scale=config.fsvgd_kde_scale)
  return train_particle_method(run, function_space=settings)


METHOD = Method(
    name="fsvgd", title="f-SVGD", config=FsvgdConfig, needs=(network_kinds.PARTICLES,), train=train,
    order=9, summary="particles moved by SVGD on their function values (Wang et al. 2019)",
    takes_input_transform=False, takes_penalty=False)
