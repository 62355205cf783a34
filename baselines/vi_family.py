"""The three mean-field methods every benchmark compares, run one way for all binaries.

  vi                 mean-field VI, M posterior draws for the predictive;
  refined_vi         the same VI model, then M refined samples (paper Algorithm 1);
  vi_equal_compute   VI trained further for M * K * T more Adam steps, the
                     steps refinement spends (the fair-compute baseline).
The three share one VI checkpoint directory when a benchmark's runs point at
the same `vi_checkpoint_dir`, so the mean-field model is trained once.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from auxiliary_sampling.elbo_estimate import estimate_elbo
from auxiliary_sampling.predictive import posterior_draws
from auxiliary_sampling.refine import RefinementResult, refine
from auxiliary_sampling.schedule import LEARNING_RATE_RULES, AuxiliarySchedule
from auxiliary_sampling.training_data import LogLikelihoodFn
from auxiliary_sampling.weight_noise import check_weight_noise
from baselines.vi import MeanFieldTrainer

VI_FAMILY = ("vi", "refined_vi", "vi_equal_compute")


@dataclasses.dataclass
class RefinedViConfig:
  """Settings shared by the VI family (paper Section 4.1 defaults); benchmark configs extend it."""

  seed: int = 0
  batch_size: int = 256
  learning_rate: float = 1e-3
  vi_steps: int = 30_000
  empirical_bayes_prior: bool = True      # learn one prior scale per weight tensor (else fixed N(0, 1))
  num_samples: int = 10
  num_auxiliary: int = 5
  variance_ratio: float = 0.7
  steps_per_auxiliary: int = 200
  refine_learning_rate_rule: str = "paper"
  refine_weight_noise: str = "per_example"  # or per_batch: one weight draw per member and step (faster, noisier)
  equal_compute_steps: int = -1          # -1: num_samples * num_auxiliary * steps_per_auxiliary
  elbo_num_samples: int = 10
  stage_elbo_aux: bool = False           # refined_vi: whole-dataset ELBO_aux after every stage (Figure 4)
  vi_checkpoint_dir: Optional[str] = None
  steps_per_checkpoint: int = 5_000

  def check_vi_family(self) -> None:
    """Raises ValueError naming the first bad shared setting and what is allowed."""
    if self.refine_learning_rate_rule not in LEARNING_RATE_RULES:
      raise ValueError(f"unknown refine_learning_rate_rule {self.refine_learning_rate_rule!r}; allowed: "
                       f"{', '.join(LEARNING_RATE_RULES)}")
    check_weight_noise(self.refine_weight_noise)
    for name in ("batch_size", "vi_steps", "num_samples", "num_auxiliary", "elbo_num_samples",
                 "steps_per_checkpoint"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
    if self.seed < 0:
      raise ValueError(f"seed={self.seed} must be >= 0")
    if self.steps_per_auxiliary < 0:
      raise ValueError(f"steps_per_auxiliary={self.steps_per_auxiliary} must be >= 0")
    if not 0 < self.variance_ratio < 1:
      raise ValueError(f"variance_ratio={self.variance_ratio} must be in (0, 1)")
    if not self.learning_rate > 0:
      raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
    if self.equal_compute_steps < -1:
      raise ValueError(f"equal_compute_steps={self.equal_compute_steps} must be >= 0 (or -1 for M * K * T)")

  @property
  def extra_vi_steps(self) -> int:
    if self.equal_compute_steps >= 0:
      return self.equal_compute_steps
    return self.num_samples * self.num_auxiliary * self.steps_per_auxiliary


@dataclasses.dataclass
class ViFamilyRun:
  """A trained (and possibly refined) VI-family model, with its metrics and timings so far."""

  model: tf.Module                          # the trained mean-field model (after any extra training)
  refinement: Optional[RefinementResult]    # refined_vi only
  num_samples: int
  metrics: dict
  timings: dict
  training_trace: np.ndarray                # [steps] minibatch ELBO estimates of VI training

  def sample_outputs(self, inputs) -> tf.Tensor:
    """[M, batch, ...] outputs of the M posterior samples the method predicts with."""
    if self.refinement is not None:
      return self.refinement.model(inputs)
    return posterior_draws(self.model, inputs, self.num_samples)


def run_vi_family(method: str, config: RefinedViConfig, model_fn: Callable[[Optional[int]], tf.Module],
                  inputs, labels, log_likelihood_fn: LogLikelihoodFn, output_dir: str) -> ViFamilyRun:
  """Trains (resuming from `config.vi_checkpoint_dir`), then trains further or refines as `method` says.

  `model_fn(num_members)` builds the benchmark's mean-field architecture.
  """
  if method not in VI_FAMILY:
    raise ValueError(f"unknown VI-family method {method!r}; allowed: {', '.join(VI_FAMILY)}")
  model = model_fn(None)
  trainer = MeanFieldTrainer(model, inputs, labels, log_likelihood_fn, learning_rate=config.learning_rate,
                             batch_size=config.batch_size, seed=config.seed,
                             steps_per_checkpoint=config.steps_per_checkpoint)
  training = trainer.train(config.vi_steps,
                           checkpoint_dir=config.vi_checkpoint_dir or os.path.join(output_dir, "checkpoints", "vi"),
                           summary_dir=os.path.join(output_dir, "summaries", "vi"))
  metrics = {"vi_resumed_from_step": training.resumed_from_step}
  timings = {"train_seconds": training.train_seconds}
  trace = training.trace
  if method == "vi_equal_compute":
    total_steps = config.vi_steps + config.extra_vi_steps
    if config.extra_vi_steps:
      extended = trainer.train(total_steps, checkpoint_dir=os.path.join(output_dir, "checkpoints", "extra"),
                               summary_dir=os.path.join(output_dir, "summaries", "extra"))
      timings["extra_train_seconds"] = extended.train_seconds - training.train_seconds
      trace = extended.trace
    metrics["total_vi_steps"] = total_steps
  metrics["elbo"] = float(estimate_elbo(model, inputs, labels, log_likelihood_fn,
                                        num_samples=config.elbo_num_samples))
  refinement = None
  if method == "refined_vi":
    refinement = refine(
        model_fn, model, inputs, labels, log_likelihood_fn, num_samples=config.num_samples,
        schedule=AuxiliarySchedule.geometric(config.variance_ratio, config.num_auxiliary),
        steps_per_auxiliary=config.steps_per_auxiliary, learning_rate_rule=config.refine_learning_rate_rule,
        batch_size=config.batch_size, seed=config.seed, elbo_num_samples=config.elbo_num_samples,
        weight_noise=config.refine_weight_noise, stage_elbo_aux=config.stage_elbo_aux)
    metrics["elbo_aux"] = refinement.elbo_aux_estimate
    metrics["elbo_aux_std"] = float(np.std(refinement.elbo_aux))
    metrics["elbo_start_members"] = refinement.initial_elbo_estimate
    timings["refine_seconds"] = refinement.timings["refine_seconds"]
    timings["refine_total_seconds"] = refinement.timings["total_seconds"]
    if refinement.stage_elbo_aux is not None:
      timings["stage_elbo_seconds"] = refinement.timings["stage_elbo_seconds"]
  return ViFamilyRun(model=model, refinement=refinement, num_samples=config.num_samples, metrics=metrics,
                     timings=timings, training_trace=trace)
