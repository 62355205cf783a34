"""Refined variational inference: local refinement of a mean-field posterior.

Havasi, Snoek, Tran, Gordon, Hernandez-Lobato, "Sampling the Variational Posterior with Local
Refinement", Entropy 2021. A mean-field Gaussian posterior q(w) over a network's weights is
trained as usual (a `TrainingLoop` of an `ElboObjective` and a `GradientUpdate`); `refine()`
then draws each posterior sample through K auxiliary variables a_1..K (`AuxiliarySchedule`; the
paper's Section 2), refitting q(w | a_1..k) after each draw, and returns the refined samples with
their bound ELBO_aux (`RefinementResult`; Section 3: it is at least the ELBO).

The public surface is importable from here:

  from auxiliary_sampling import AuxiliarySchedule, DenseReparameterization, refine

Names load lazily, on first use: `import auxiliary_sampling.schedule` stays cheap (NumPy only),
and a name's module, with TensorFlow, loads when the name is asked for. The modules themselves
remain importable for what is not listed in `__all__`.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# Public name -> the module of this package that defines it.
_PUBLIC = {
    # Bayesian layers with a member axis (one weight sample per member) and their models.
    "DenseReparameterization": "layers", "Conv2DFlipout": "layers", "GaussianSample": "layers",
    "MeanFieldLayer": "layers", "FlattenImage": "layers", "MaxPool2D": "layers",
    "LayerChain": "layers",
    "mean_field_parameters": "model_parameters", "model_kl": "model_parameters",
    "layers_of": "model_parameters", "num_members_of": "model_parameters",
    # Gaussian mean-field parameters and their (conditional) priors.
    "GaussianMeanField": "parameters",
    "INITIAL_UNTRANSFORMED_POSTERIOR_SCALE": "parameters", "inverse_softplus": "parameters",
    # The Appendix A closed forms: a_k given w, the marginal of a_k, q(w | a) and p(w | a).
    "auxiliary_given_weight": "conditionals", "auxiliary_marginal": "conditionals",
    "posterior_given_auxiliary": "conditionals", "prior_given_auxiliary": "conditionals",
    "normal_log_prob": "conditionals", "normal_kl": "conditionals",
    # Auxiliary variance schedules and the refinement's learning-rate rules.
    "AuxiliarySchedule": "schedule", "LEARNING_RATE_RULES": "schedule",
    # Refinement: Gaussian (refine, Refiner) and Normal / Cauchy auxiliaries of any log joint.
    "refine": "refine", "Refiner": "refine", "stream_seeds": "stream_seeding",
    "RefinementResult": "refinement_result",
    "refine_non_gaussian": "non_gaussian_refinement", "StableBlock": "stable_auxiliaries",
    "TiltedGaussian": "tilted",
    # The compiled training loop and its public hooks: what a step maximises (Objective), what
    # it does with it (Update), where its minibatches come from (BatchSource); the ELBO and
    # Adam on it; whole-dataset ELBO estimates.
    "TrainingLoop": "training_loop", "Objective": "training_loop", "Update": "training_loop",
    "ReplicaBatch": "training_loop", "InputTransform": "training_loop",
    "LoopSettings": "loop_settings",
    "BatchSource": "training_batches", "UniformBatches": "training_batches",
    "GroupedBatches": "training_batches",
    "ElboObjective": "elbo_objective", "GradientUpdate": "elbo_objective", "Adam": "adam",
    "estimate_elbo": "elbo_estimate", "estimate_elbo_terms": "elbo_estimate",
    "ElboTerms": "elbo_estimate",
    "LogLikelihoodFn": "training_data", "check_data": "training_data",
    # Predictive log-likelihoods over the member axis (the paper's test MLL).
    "gaussian_log_likelihood": "predictive", "categorical_log_likelihood": "predictive",
    "predictive_log_likelihood": "predictive", "marginal_log_likelihood": "predictive",
    "posterior_draws": "predictive", "log_mean_exp": "predictive",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
  """Loads a public name's module on first use (PEP 562) and caches the name here."""
  module_name = _PUBLIC.get(name)
  if module_name is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
  globals()[name] = value
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))


class _Library(types.ModuleType):
  """This package, keeping `refine` the function: the import system binds every submodule to its
  name on the package when it first loads, and `auxiliary_sampling.refine` (the module) would
  otherwise hide `refine()` from `from auxiliary_sampling import refine`."""

  def __setattr__(self, name: str, value: Any) -> None:
    if name in _PUBLIC and isinstance(value, types.ModuleType):
      return   # the submodule stays reachable as sys.modules["auxiliary_sampling.refine"]
    super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Library
