"""One dispatch from a method name to a trained predictive, for every benchmark.

A benchmark supplies its networks (`Networks`), its training data, its
log-likelihood and an output directory; `train_method` trains (resuming from
checkpoints made with the same settings), and returns the M samples the
method predicts with, the metrics gathered while training and the timings.
The benchmark evaluates the samples with its own metrics.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from auxiliary_sampling.training_data import LogLikelihoodFn
from auxiliary_sampling.predictive import posterior_draws
from auxiliary_sampling.refine import RefinementResult
from baselines import deep_ensemble, mnf, particles
from baselines.checkpoint_settings import claim_checkpoint_dir
from baselines.config import (ENSEMBLE, MNF, PARTICLE_METHODS, PARTICLES, VI, VI_FAMILY, VOGN,
                              VOGN_FAMILY, MethodConfig)
from baselines.training import InputTransform, Penalty
from baselines.vi_family import run_vi_family
from common.config import absent_values
from common.results import write_results


@dataclasses.dataclass
class Networks:
  """A benchmark's architectures, one builder per kind of method."""

  mean_field: Callable[[Optional[int]],
                       tf.Module]  # num_members (None: no member axis) -> VI network
  mnf: Optional[Callable[[], tf.Module]]             # -> MNF network (None: no MNF version)
  ensemble: Callable[[int], tf.Module]               # num_members -> ensemble with a member axis
  # Penalty of a network's point-estimated weights per example (ResNet-20's L2), or None.
  penalty: Optional[Penalty] = None
  # num_particles -> point-weight networks on a member axis (baselines.particles), or None.
  particles: Optional[Callable[[int], tf.Module]] = None


@dataclasses.dataclass
class MethodRun:
  """A trained method: the networks it predicts with, metrics so far, timings."""

  sample_outputs: Callable[[tf.Tensor], tf.Tensor]  # inputs -> [M, batch, ...] outputs of M samples
  models: list[tf.Module]                             # the trained networks (for benchmark metrics)
  metrics: dict
  timings: dict
  refinement: Optional[RefinementResult] = None       # refined_vi, refined_vogn only


def checkpoint_dir_of(config: MethodConfig, trainer: str, output_dir: str) -> str:
  """Where a trainer's checkpoints go; claimed for the run's settings (see checkpoint_settings)."""
  if trainer == VI and config.vi_checkpoint_dir:
    directory = config.vi_checkpoint_dir
  elif trainer == VOGN and config.vi_checkpoint_dir:
    directory = os.path.join(config.vi_checkpoint_dir, VOGN)
  else:
    directory = os.path.join(output_dir, "checkpoints", trainer)
  claim_checkpoint_dir(directory, config.identity(trainer), config.replace_mismatched,
                       absent_values(config))
  return directory


def train_method(config: MethodConfig, networks: Networks, inputs, labels,
                 log_likelihood_fn: LogLikelihoodFn, output_dir: str,
                 input_transform: Optional[InputTransform] = None) -> MethodRun:
  """Trains `config.method` on (inputs, labels) and returns its predictive samples.

  `input_transform` augments every training batch (not MNF's).
  """
  summaries = os.path.join(output_dir, "summaries")
  num_examples = int(np.shape(inputs)[0])
  schedule = config.learning_rate_schedule(num_examples)
  checkpoint_interval = config.checkpoint_interval(num_examples)
  metrics = {}
  if config.method in VI_FAMILY + VOGN_FAMILY:
    run = run_vi_family(
        config, networks.mean_field, inputs, labels, log_likelihood_fn, output_dir,
        checkpoint_dir_fn=lambda trainer: checkpoint_dir_of(config, trainer, output_dir),
        penalty=networks.penalty, input_transform=input_transform)
    return MethodRun(sample_outputs=run.sample_outputs, models=[run.model], metrics=run.metrics,
                     timings=run.timings, refinement=run.refinement)
  if config.method == "mnf":
    if networks.mnf is None or input_transform is not None:
      raise ValueError("MNF needs an MNF version of the networks and takes no input transform")
    model = networks.mnf()
    training = mnf.train_mnf(model, inputs, labels, log_likelihood_fn,
                             num_steps=config.num_steps(MNF, num_examples), learning_rate=schedule,
                             batch_size=config.batch_size, seed=config.seed,
                             checkpoint_dir=checkpoint_dir_of(config, MNF, output_dir),
                             summary_dir=os.path.join(summaries, MNF),
                             steps_per_checkpoint=checkpoint_interval)

    def sample_outputs(batch):
      return posterior_draws(model, batch, config.eval_samples)
  elif config.method == "deep_ensemble":
    model = networks.ensemble(config.ensemble_members)
    training = deep_ensemble.train_deep_ensemble(
        model, inputs, labels, log_likelihood_fn, num_members=config.ensemble_members,
        num_steps=config.num_steps(ENSEMBLE, num_examples), learning_rate=schedule,
        batch_size=config.batch_size, epsilon=config.adversarial_epsilon, seed=config.seed,
        checkpoint_dir=checkpoint_dir_of(config, ENSEMBLE,
                                         output_dir), summary_dir=os.path.join(summaries, ENSEMBLE),
        steps_per_checkpoint=checkpoint_interval, penalty=networks.penalty,
        input_transform=input_transform)
    sample_outputs = model
  elif config.method in PARTICLE_METHODS:
    if networks.particles is None or input_transform is not None:
      raise ValueError(f"{config.method} needs particle networks and takes no input transform")
    model = networks.particles(config.num_particles)
    batch_size, num_steps = config.particle_batch_and_steps(num_examples)
    function_space = config.function_space_settings() if config.method == "fsvgd" else None
    training = particles.train_particles(
        model, inputs, labels, num_steps=num_steps, learning_rate=config.particle_learning_rate,
        batch_size=batch_size, seed=config.seed, function_space=function_space,
        checkpoint_dir=checkpoint_dir_of(config, PARTICLES, output_dir),
        summary_dir=os.path.join(summaries, config.method),
        steps_per_checkpoint=checkpoint_interval,
        weight_prior_scale=config.particle_weight_prior_scale or None)
    metrics.update(particle_steps=num_steps, particle_batch_size=batch_size)
    sample_outputs = model
  else:
    raise ValueError(f"unknown method {config.method!r}")
  return MethodRun(sample_outputs=sample_outputs, models=[model],
                   metrics={f"{config.method}_resumed_from_step": training.resumed_from_step,
                            **metrics},
                   timings={"train_seconds": training.train_seconds})


def write_method_results(output_dir: str, benchmark: str, config: MethodConfig, metrics: dict,
                         timings: dict) -> str:
  """results.json of one benchmark run: its dataset, method, seed and every setting."""
  return write_results(output_dir, benchmark=benchmark, dataset=getattr(config, "dataset", None),
                       method=config.method, seed=config.seed, flags=config.as_dict(),
                       metrics=metrics, timings=timings)
