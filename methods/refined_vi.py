"""refined_vi: VI, then M samples each refined by K auxiliary variables (paper Algorithm 1).

Also the refinement's settings (`RefinementConfig`), which refined_vogn and vi_equal_compute
(its compute budget) share.
"""
from __future__ import annotations

import dataclasses

from auxiliary_sampling.schedule import (LEARNING_RATE_RULES, PAPER_NUM_AUXILIARY,
                                         PAPER_STEPS_PER_AUXILIARY, PAPER_VARIANCE_RATIO,
                                         AuxiliarySchedule)
from auxiliary_sampling.weight_noise import WEIGHT_NOISE
from common.config import NOTHING, RESULTS, Config, UsageError, setting
from methods import network_kinds, registry
from methods.registry import VI, Method, MethodRun, TrainingInputs
from methods.vi import ViConfig


@dataclasses.dataclass
class RefinementConfig(Config):
  """Settings of local refinement (paper Section 3, Algorithm 1; defaults of Section 4.1)."""

  num_auxiliary: int = setting(PAPER_NUM_AUXILIARY, "K: auxiliary variables per refined sample.",
                               minimum=1, shapes=RESULTS)
  variance_ratio: float = setting(
      PAPER_VARIANCE_RATIO, "Each auxiliary variable's share of the remaining prior variance.",
      above=0, below=1, shapes=RESULTS)
  steps_per_auxiliary: int = setting(PAPER_STEPS_PER_AUXILIARY,
                                     "T: Adam steps of refinement after each auxiliary variable.",
                                     minimum=0, shapes=RESULTS)
  refine_learning_rate_rule: str = setting(
      "paper", "Refinement learning rates: paper (1e-3 scaled by the conditional prior's std) or "
      "authors_code (the public code's 1e-5 rule).", choices=LEARNING_RATE_RULES, shapes=RESULTS)
  refine_weight_noise: str = setting(
      "per_example",
      "Refinement's weight noise: per_example (local reparameterisation, Flipout) or "
      "per_batch (one weight draw per member and step: faster, noisier).", choices=WEIGHT_NOISE,
      shapes=RESULTS)
  refit_deterministic: bool = setting(
      False,
      "refined_vi: also refit each member's own copy of the network's point-estimated weights "
      "(deterministic layers, batch norm), as the authors' Keras refit did; else only the "
      "Bayesian layers' posteriors move (paper Algorithm 1).", shapes=RESULTS)
  stage_elbo_aux: bool = setting(
      False,
      "refined_vi: whole-training-set ELBO_aux after every stage (Figure 4 without minibatch "
      "noise; the refined samples are unchanged).", shapes=RESULTS)
  stage_elbo_aux_examples: int = setting(
      0, "refined_vi with --stage_elbo_aux: estimate each stage's ELBO_aux (and the start's) on "
      "this many training examples, evenly spaced, their log-likelihood scaled to the whole set, "
      "with the same weight draws at every stage (0: the whole set). The final ELBO_aux is always "
      "the whole set's.", minimum=0, shapes=RESULTS, only_with="stage_elbo_aux")
  prepare_refinement: bool = setting(
      True, "refined_vi, refined_vogn on one device: trace (and with --jit_compile_refinement "
      "compile) the refinement on a second thread while VI trains, so that it starts at once "
      "after; the results are the same either way.", shapes=NOTHING)

  def check(self) -> None:
    """Refinement's schedule must be one a float32 model can hold (before any training starts);
    only a network with point-estimated weights can refit them."""
    super().check()
    if self.refit_deterministic and not getattr(self, "has_deterministic_weights", False):
      raise UsageError("--refit_deterministic: this benchmark's mean-field networks have no "
                       "point-estimated weights to refit; allowed: --refit_deterministic=false")
    if not registry.method(self.method).refines:
      return
    try:
      AuxiliarySchedule.geometric(self.variance_ratio, self.num_auxiliary).check_dtype("float32")
    except ValueError as error:
      raise UsageError(str(error)) from None


@dataclasses.dataclass
class RefinedViConfig(ViConfig, RefinementConfig):
  """Settings of refined VI: VI's and the refinement's."""


def train(run: TrainingInputs) -> MethodRun:
  """Fits VI (or resumes it), then refines M samples of it."""
  from methods.trainers.vi_family import REFINE, train_mean_field_method  # TensorFlow loads here
  return train_mean_field_method(run, fit=VI, then=REFINE)


METHOD = Method(
    name="refined_vi", title="Refined VI", config=RefinedViConfig,
    needs=(network_kinds.MEAN_FIELD,), train=train, order=2,
    summary="VI, then M refined samples (paper Algorithm 1)", shares_training_with="vi",
    refines=True)
