"""deep_ensemble: independently trained point-weight networks (Lakshminarayanan et al. 2017)."""
from __future__ import annotations

import dataclasses
import os

from common.config import RESULTS, Config, setting
from methods import network_kinds
from methods.loop_settings import loop_settings_of
from methods.registry import ENSEMBLE, Method, MethodRun, TrainingInputs


@dataclasses.dataclass
class EnsembleConfig(Config):
  """Settings of the deep ensemble (the learning rate and batch are every method's)."""

  ensemble_members: int = setting(10, "Members of the deep ensemble.", minimum=1,
                                  shapes=(ENSEMBLE,))
  ensemble_steps: int = setting(5_000, "Adam steps of every ensemble member.", minimum=1,
                                shapes=RESULTS)
  adversarial_epsilon: float = setting(
      0.01, "Deep ensemble: size of the adversarial input perturbation (0: none).", minimum=0,
      shapes=(ENSEMBLE,))


def train(run: TrainingInputs) -> MethodRun:
  """Trains every member at once on its own batches (resuming from the checkpoint)."""
  from methods.trainers.deep_ensemble import train_deep_ensemble  # TensorFlow loads here
  config = run.config
  num_examples = run.num_examples
  model = run.networks.builder(network_kinds.ENSEMBLE)(config.ensemble_members)
  training = train_deep_ensemble(
      model, run.inputs, run.labels, run.log_likelihood_fn, num_members=config.ensemble_members,
      num_steps=config.num_steps(ENSEMBLE, num_examples),
      learning_rate=config.learning_rate_schedule(num_examples), batch_size=config.batch_size,
      epsilon=config.adversarial_epsilon, seed=config.seed,
      checkpoint_dir=run.checkpoint_dir(ENSEMBLE),
      summary_dir=os.path.join(run.output_dir, "summaries", ENSEMBLE),
      steps_per_checkpoint=config.checkpoint_interval(num_examples),
      penalty=run.networks.penalty, input_transform=run.input_transform,
      loop_settings=loop_settings_of(config))
  return MethodRun(sample_outputs=model, models=[model],
                   metrics={"deep_ensemble_resumed_from_step": training.resumed_from_step},
                   timings={"train_seconds": training.train_seconds})


METHOD = Method(
    name="deep_ensemble", title="Deep ensemble", config=EnsembleConfig,
    needs=(network_kinds.ENSEMBLE,), train=train, order=5,
    summary="deep ensemble of point-weight networks")
