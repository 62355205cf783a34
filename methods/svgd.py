"""svgd: a particle posterior by Stein variational gradient descent on the weights (Liu & Wang
2016); also the particles' settings (`ParticleConfig`), which fsvgd extends."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from methods.trainers.trainer_options import PARTICLE_INITIALIZERS
from common.config import Config, UsageError, setting
from methods import network_kinds, registry
from methods.loop_settings import loop_settings_of
from methods.registry import PARTICLES, Method, MethodRun, TrainingInputs

# The f-POVI paper's UCI protocol (Wang et al. 2019, Appendix B.2.1): batch 100 for 500 epochs,
# or batch 1000 for 3000 epochs on datasets of more than 1,000 examples (training sets of more
# than 900 in its 90/10 splits).
PARTICLE_SMALL_DATA, PARTICLE_LARGE_DATA = (100, 500), (1000, 3000)
PARTICLE_LARGE_TRAINING_SET = 900


@dataclasses.dataclass
class ParticleConfig(Config):
  """Settings of the particle posteriors (svgd, fsvgd)."""

  num_particles: int = setting(20, "svgd, fsvgd: particles (networks) of the posterior.",
                               minimum=2, maximum=1000, shapes=(PARTICLES,))
  particle_learning_rate: float = setting(
      4e-3, "svgd, fsvgd: Adam's step size on -phi (the f-POVI paper's 0.004).", above=0,
      maximum=1.0, shapes=(PARTICLES,))
  particle_batch_size: int = setting(
      0, "svgd, fsvgd: minibatch (0: the f-POVI protocol's, 100, or 1000 on training sets of more "
      "than 900 examples).", minimum=0, shapes=(PARTICLES,))
  particle_epochs: int = setting(
      0, "svgd, fsvgd: epochs of ceil(N / batch) steps (0: the f-POVI protocol's, 500, or 3000 on "
      "training sets of more than 900 examples).", minimum=0, shapes=(PARTICLES,))
  particle_weight_prior_scale: float = setting(
      0.0, "svgd, fsvgd: std of the Gaussian prior on every weight and bias (0: the f-POVI "
      "paper's N(0, 1/fan_out)).", minimum=0, shapes=(PARTICLES,))
  particle_initializer: str = setting(
      "he_glorot", "svgd, fsvgd: initial weights, he_glorot (He-normal hidden layers, "
      "Glorot-uniform output, as the deep ensemble) or fpovi (the f-POVI authors' "
      "N(0, 1/(fan_in + fan_out + 1)) on every kernel); biases start at 0 either way. With "
      "--initial_noise_scale=0.5 the authors' whole initialisation.",
      choices=PARTICLE_INITIALIZERS, shapes=(PARTICLES,))

  def check_replicas(self, num_replicas: int) -> None:
    super().check_replicas(num_replicas)
    if registry.trains_with(self, ParticleConfig) and num_replicas > 1:
      raise UsageError(f"--method={self.method} couples every particle on one device, but the "
                       f"strategy has {num_replicas} replicas; allowed: one device "
                       "(--num_cores=1)")

  def particle_batch_and_steps(self, num_examples: int) -> tuple[int, int]:
    """(minibatch, steps) of svgd and fsvgd on `num_examples` training examples."""
    large = num_examples > PARTICLE_LARGE_TRAINING_SET
    batch, epochs = PARTICLE_LARGE_DATA if large else PARTICLE_SMALL_DATA
    batch = self.particle_batch_size or batch
    epochs = self.particle_epochs or epochs
    return batch, epochs * -(-num_examples // batch)


def train_particle_method(run: TrainingInputs, function_space: Optional[object]) -> MethodRun:
  """Moves the benchmark's particle networks by SVGD, in weight space or (given
  `methods.trainers.particles.FunctionSpaceSettings`) in function space."""
  from methods.trainers.particles import train_particles  # TensorFlow loads here
  config = run.config
  model = run.networks.builder(network_kinds.PARTICLES)(config.num_particles)
  batch_size, num_steps = config.particle_batch_and_steps(run.num_examples)
  training = train_particles(
      model, run.inputs, run.labels, num_steps=num_steps,
      learning_rate=config.particle_learning_rate, batch_size=batch_size, seed=config.seed,
      function_space=function_space, checkpoint_dir=run.checkpoint_dir(PARTICLES),
      summary_dir=os.path.join(run.output_dir, "summaries", config.method),
      steps_per_checkpoint=config.checkpoint_interval(run.num_examples),
      weight_prior_scale=config.particle_weight_prior_scale or None,
      loop_settings=loop_settings_of(config))
  return MethodRun(sample_outputs=model, models=[model],
                   metrics={f"{config.method}_resumed_from_step": training.resumed_from_step,
                            "particle_steps": num_steps, "particle_batch_size": batch_size},
                   timings={"train_seconds": training.train_seconds})


def train(run: TrainingInputs) -> MethodRun:
  """Moves the particles by SVGD on their weights."""
  return train_particle_method(run, function_space=None)


METHOD = Method(
    name="svgd", title="SVGD", config=ParticleConfig, needs=(network_kinds.PARTICLES,), train=train,
    order=8, summary="particles moved by SVGD on their weights (Liu & Wang 2016)",
    takes_input_transform=False, takes_penalty=False)
