"""mnf: multiplicative normalizing flows (Louizos & Welling 2017), M posterior draws predict."""
from __future__ import annotations

import dataclasses
import os

from common.config import RESULTS, Config, setting
from methods import network_kinds
from methods.loop_settings import loop_settings_of
from methods.registry import MNF, Method, MethodRun, TrainingInputs


@dataclasses.dataclass
class MnfConfig(Config):
  """Settings of MNF (the learning rate, batch and draws are every method's)."""

  mnf_steps: int = setting(30_000, "Adam steps of MNF.", minimum=1, shapes=RESULTS)


def train(run: TrainingInputs) -> MethodRun:
  """Trains the benchmark's MNF network (resuming from its checkpoint)."""
  from auxiliary_sampling.predictive import posterior_draws  # TensorFlow loads here
  from methods.trainers.mnf import train_mnf
  config = run.config
  num_examples = run.num_examples
  model = run.networks.builder(network_kinds.MNF)()
  training = train_mnf(model, run.inputs, run.labels, run.log_likelihood_fn,
                       num_steps=config.num_steps(MNF, num_examples),
                       learning_rate=config.learning_rate_schedule(num_examples),
                       batch_size=config.batch_size, seed=config.seed,
                       checkpoint_dir=run.checkpoint_dir(MNF),
                       summary_dir=os.path.join(run.output_dir, "summaries", MNF),
                       steps_per_checkpoint=config.checkpoint_interval(num_examples),
                       loop_settings=loop_settings_of(config))

  def sample_outputs(batch):
    return posterior_draws(model, batch, config.eval_samples)
  return MethodRun(sample_outputs=sample_outputs, models=[model],
                   metrics={"mnf_resumed_from_step": training.resumed_from_step},
                   timings={"train_seconds": training.train_seconds})


METHOD = Method(
    name="mnf", title="MNF", config=MnfConfig, needs=(network_kinds.MNF,), train=train, order=4,
    summary="multiplicative normalizing flows (Louizos & Welling 2017)",
    takes_input_transform=False, takes_penalty=False)
