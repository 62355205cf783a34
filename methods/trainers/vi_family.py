"""The mean-field methods, one way for every benchmark: fit, then predict, refine or train on.

A mean-field posterior is fitted by VI (`methods.trainers.vi`) or VOGN
(`methods.trainers.vogn`), resuming
from its checkpoint; then the method predicts with M posterior draws (vi, vogn), refines M
samples (refined_vi, refined_vogn; paper Algorithm 1), or trains VI further for the M * K * T
Adam steps refinement spends (vi_equal_compute, the fair-compute baseline). Runs of one
benchmark, dataset and seed that point at the same `vi_checkpoint_dir` share the fitted model,
so it is trained once; the VOGN methods share its `vogn` subdirectory.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from auxiliary_sampling.elbo_estimate import estimate_elbo_terms
from auxiliary_sampling.predictive import posterior_draws
from auxiliary_sampling.refine import RefinementResult, Refiner
from auxiliary_sampling.schedule import AuxiliarySchedule
from auxiliary_sampling.training_data import LogLikelihoodFn
from auxiliary_sampling.training_loop import InputTransform
from methods.trainers.background import BackgroundWork
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.training import Penalty
from methods.trainers.vi import MeanFieldTrainer
from methods.trainers.vogn import VognTrainer
from methods import network_kinds
from methods.loop_settings import loop_settings_of
from methods.registry import EXTRA_VI, REFINEMENT, VI, VOGN, MethodRun, TrainingInputs

# What follows the fit: predict with posterior draws, refine samples, or train VI further.
CONTINUATIONS = PREDICT, REFINE, TRAIN_FURTHER = ("predict", "refine", "train_further")


@dataclasses.dataclass
class ViFamilyRun:
  """A trained (and possibly refined) VI-family model, with its metrics and timings so far."""

  model: tf.Module  # the trained mean-field model (after any extra training)
  refinement: Optional[RefinementResult]    # refined_vi only
  num_samples: int
  metrics: dict
  timings: dict

  def sample_outputs(self, inputs) -> tf.Tensor:
    """[M, batch, ...] outputs of the M posterior samples the method predicts with."""
    if self.refinement is not None:
      return self.refinement.model(inputs)
    return posterior_draws(self.model, inputs, self.num_samples)


def train_mean_field_method(run: TrainingInputs, fit: str, then: str) -> MethodRun:
  """A registered mean-field method (`methods.vi` and the others): `run_vi_family` on the
  benchmark's mean-field networks, as the method's `fit` and `then` say."""
  trained = run_vi_family(run.config, run.networks.builder(network_kinds.MEAN_FIELD), run.inputs,
                          run.labels, run.log_likelihood_fn, run.output_dir,
                          checkpoint_dir_fn=run.checkpoint_dir, penalty=run.networks.penalty,
                          input_transform=run.input_transform, fit=fit, then=then)
  return MethodRun(sample_outputs=trained.sample_outputs, models=[trained.model],
                   metrics=trained.metrics, timings=trained.timings,
                   refinement=trained.refinement)


def run_vi_family(config, model_fn: Callable[[Optional[int]], tf.Module], inputs,
                  labels, log_likelihood_fn: LogLikelihoodFn, output_dir: str,
                  checkpoint_dir_fn: Optional[Callable[[str], str]] = None,
                  penalty: Optional[Penalty] = None,
                  input_transform: Optional[InputTransform] = None, *, fit: str = VI,
                  then: str = PREDICT) -> ViFamilyRun:
  """Fits the mean-field posterior by `fit` (VI or VOGN, resuming from its checkpoint), then
  predicts, refines or trains VI further as `then` says (one of CONTINUATIONS).

  `config` holds the binary's settings (the method's among them);
  `model_fn(num_members)` builds the benchmark's mean-field architecture;
  `checkpoint_dir_fn(trainer)` gives the checkpoint directory of "vi",
  "extra_vi", "vogn" and "refinement" (default: under `output_dir/checkpoints`;
  a refinement resumes from its own after an interruption); `penalty` (per
  example) of the point-estimated weights is subtracted N-fold from VI's
  objective, and from refinement's when it refits them; `input_transform`
  augments every training batch of VI and refinement.
  """
  if fit not in (VI, VOGN) or then not in CONTINUATIONS or (fit == VOGN and then == TRAIN_FURTHER):
    raise ValueError(f"fit={fit!r}, then={then!r}; allowed: fit {VI} or {VOGN}, then one of "
                     f"{', '.join(CONTINUATIONS)} ({TRAIN_FURTHER} after {VI} only)")
  if checkpoint_dir_fn is None:
    def checkpoint_dir_fn(trainer):
      return os.path.join(output_dir, "checkpoints", trainer)
  num_examples = int(np.shape(inputs)[0])
  loop_settings = loop_settings_of(config)
  model = model_fn(None)
  if fit == VOGN:
    if penalty is not None or input_transform is not None:
      raise ValueError("VOGN takes no penalty of point estimates and no input transform")
    trainer_name = VOGN
    trainer = VognTrainer(model, inputs, labels, log_likelihood_fn,
                          settings=config.vogn_settings(),
                          learning_rate=LearningRateSchedule(config.vogn_learning_rate),
                          batch_size=config.batch_size, seed=config.seed,
                          steps_per_checkpoint=config.checkpoint_interval(num_examples),
                          loop_settings=loop_settings)
  else:
    trainer_name = VI
    trainer = MeanFieldTrainer(model, inputs, labels, log_likelihood_fn,
                               learning_rate=config.learning_rate_schedule(num_examples),
                               batch_size=config.batch_size, seed=config.seed,
                               steps_per_checkpoint=config.checkpoint_interval(num_examples),
                               penalty=penalty, input_transform=input_transform,
                               optimizer=config.vi_optimizer, momentum=config.vi_momentum,
                               weight_noise=config.vi_weight_noise, loop_settings=loop_settings)
  vi_steps = config.num_steps(VI, num_examples)
  build_refiner, refinement_dir = None, None
  if then == REFINE:
    # Claimed before VI trains, so that a mismatch is found at once, not hours later.
    refinement_dir = checkpoint_dir_fn(REFINEMENT)
    if penalty is not None and config.refit_deterministic:
      def penalty_fn(members):
        return num_examples * penalty(members)
    else:
      penalty_fn = None
    build_refiner = functools.partial(
        Refiner, model_fn, inputs, labels, log_likelihood_fn, num_samples=config.num_samples,
        batch_size=config.batch_size, weight_noise=config.refine_weight_noise,
        refit_deterministic=config.refit_deterministic, penalty_fn=penalty_fn,
        input_transform=input_transform, loop_settings=loop_settings)
  timings = {}
  refiner, preparation = None, None
  # The refiner traces (and compiles) on a second thread while VI trains, from the end of VI's
  # first chunk (its own tracing and compiling done): two traces at once only take turns. On one
  # device only: the preparation's step would run its all-reduces beside VI's.
  if build_refiner is not None and config.prepare_refinement and (
      tf.distribute.get_strategy().num_replicas_in_sync == 1):
    refiner = _timed_build(build_refiner, timings)
    preparation = BackgroundWork(
        functools.partial(refiner.prepare, elbo_num_samples=config.elbo_num_samples))
  with preparation or contextlib.nullcontext():
    training = trainer.train(vi_steps, checkpoint_dir=checkpoint_dir_fn(trainer_name),
                             summary_dir=os.path.join(output_dir, "summaries", trainer_name),
                             after_chunk=preparation.start if preparation else None)
    metrics = {f"{trainer_name}_resumed_from_step": training.resumed_from_step}
    timings["train_seconds"] = training.train_seconds
    if training.setup_seconds is not None:
      timings["train_setup_seconds"] = training.setup_seconds
    if preparation is not None:
      timings["refine_prepare_seconds"] = preparation.result()
  if then == TRAIN_FURTHER:
    total_steps = vi_steps + config.extra_vi_steps
    if config.extra_vi_steps:
      extended = trainer.train(total_steps, checkpoint_dir=checkpoint_dir_fn(EXTRA_VI),
                               summary_dir=os.path.join(output_dir, "summaries", EXTRA_VI))
      timings["extra_train_seconds"] = extended.train_seconds - training.train_seconds
    # The steps taken, read off the trainer, not the steps asked for.
    metrics["total_vi_steps"] = int(trainer.step.numpy())
  # The ELBO and its two terms, so that a change of the bound says what it is made of.
  terms = estimate_elbo_terms(model, inputs, labels, log_likelihood_fn,
                              num_samples=config.elbo_num_samples,
                              description=f"ELBO estimate of the {trainer_name} posterior")
  metrics.update(elbo=float(terms.elbo),
                 elbo_expected_log_likelihood=float(terms.expected_log_likelihood),
                 elbo_kl=float(terms.kl))
  refinement = None
  if build_refiner is not None:
    if refiner is None:
      refiner = _timed_build(build_refiner, timings)
    refinement = refiner.refine(
        model, schedule=AuxiliarySchedule.geometric(config.variance_ratio, config.num_auxiliary),
        steps_per_auxiliary=config.steps_per_auxiliary,
        learning_rate_rule=config.refine_learning_rate_rule, seed=config.seed,
        elbo_num_samples=config.elbo_num_samples, stage_elbo_aux=config.stage_elbo_aux,
        stage_elbo_examples=config.stage_elbo_aux_examples,
        checkpoint_dir=refinement_dir)
    metrics["refinement_resumed_from"] = refinement.resumed_from
    metrics["elbo_aux"] = refinement.elbo_aux_estimate
    metrics["elbo_aux_std"] = float(np.std(refinement.elbo_aux))
    metrics["elbo_aux_expected_log_likelihood"] = float(np.mean(refinement.expected_log_likelihood))
    metrics["elbo_aux_kl"] = float(np.mean(refinement.kl_aux))
    metrics["elbo_start_members"] = refinement.initial_elbo_estimate
    timings["refine_seconds"] = refinement.timings["refine_seconds"]
    # Building the members included (as refine() counts it); what was prepared beside VI is
    # in refine_prepare_seconds, part of VI's wall time.
    timings["refine_total_seconds"] = (refinement.timings["total_seconds"]
                                       + timings["refine_build_seconds"])
    if "trace_seconds" in refinement.timings:
      timings["refine_setup_seconds"] = refinement.timings["trace_seconds"]
    if refinement.stage_elbo_aux is not None:
      timings["stage_elbo_seconds"] = refinement.timings["stage_elbo_seconds"]
  return ViFamilyRun(model=model, refinement=refinement, num_samples=config.eval_samples,
                     metrics=metrics, timings=timings)


def _timed_build(build: Callable[[], Refiner], timings: dict) -> Refiner:
  """`build()`, its seconds recorded as timings["refine_build_seconds"]."""
  started = time.perf_counter()
  built = build()
  timings["refine_build_seconds"] = time.perf_counter() - started
  return built
