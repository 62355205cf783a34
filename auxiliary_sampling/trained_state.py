"""A trained model's state copied into a model with a member axis, and what refinement moves.

Refinement (`auxiliary_sampling.refine`) starts every member from one trained mean-field model:
its mean-field parameters' state and its other variables (deterministic weights, a learned noise
scale, batch-norm statistics) are copied into each member, matched in construction order. It
then optimises the members' mean-field posteriors, and with `refit_deterministic` their other
trainable variables too.
"""
from __future__ import annotations

import tensorflow as tf

from auxiliary_sampling.model_parameters import mean_field_parameters
from auxiliary_sampling.parameters import GaussianMeanField


def _copy_broadcast(source: tf.Variable, target: tf.Variable, what: str) -> None:
  source_shape, target_shape = tuple(source.shape), tuple(target.shape)
  if source_shape == target_shape:
    target.assign(source)
  elif target_shape[1:] == source_shape:
    target.assign(tf.broadcast_to(source[tf.newaxis], target_shape))
  elif len(source_shape) == len(target_shape) and source_shape[1:] == target_shape[1:] and (
      source_shape[0] and target_shape[0] % source_shape[0] == 0):
    # M members from S: target member m copies source member m // (M / S).
    target.assign(tf.repeat(source, target_shape[0] // source_shape[0], axis=0))
  else:
    raise ValueError(f"shape mismatch for {what}: {list(source_shape)} in the trained model, "
                     f"{list(target_shape)} in the model to refine (allowed: equal, with a "
                     "leading member axis added, or a member axis a multiple as long)")


def load_trained_state(trained_model: tf.Module, members: tf.Module) -> None:
  """Copies a trained model into a model with a member axis, broadcasting every member.

  A trained model with S members goes into M = r * S members, each copied r
  times in a row (member m of the target is member m // r of the source).

  Mean-field parameters are matched in construction order; so are the other
  trainable variables (for example a learned noise scale).
  """
  source_parameters, target_parameters = mean_field_parameters(
      trained_model), mean_field_parameters(members)
  if len(source_parameters) != len(target_parameters):
    raise ValueError(
        f"the trained model has {len(source_parameters)} mean-field parameters, the model "
        f"to refine has {len(target_parameters)}: they must be the same architecture")
  for index, (source, target) in enumerate(zip(source_parameters, target_parameters)):
    if source.event_shape != target.event_shape:
      raise ValueError(
          f"shape mismatch for mean-field parameter {index} ({source.name}): "
          f"{list(source.event_shape)} in the trained model, {list(target.event_shape)} "
          "in the model to refine")
    for source_variable, target_variable in zip(source.state_variables, target.state_variables):
      _copy_broadcast(source_variable, target_variable, f"{source.name}/{source_variable.name}")
  for kind, source_others, target_others in (
      ("trainable", _other_trainable_variables(trained_model, source_parameters),
       _other_trainable_variables(members, target_parameters)),
      ("non-trainable floating-point", _other_float_state(trained_model, source_parameters),
       _other_float_state(members, target_parameters))):
    if len(source_others) != len(target_others):
      raise ValueError(
          f"the trained model has {len(source_others)} other {kind} variables, the model "
          f"to refine has {len(target_others)}")
    for source_variable, target_variable in zip(source_others, target_others):
      _copy_broadcast(source_variable, target_variable, source_variable.name)


def _owned_by(parameters: list[GaussianMeanField]) -> set[int]:
  return {id(v) for p in parameters for v in p.state_variables}


def _other_trainable_variables(model, parameters: list[GaussianMeanField]) -> list[tf.Variable]:
  """Trainable variables outside the mean-field parameters: deterministic weights, batch norm."""
  owned = _owned_by(parameters)
  return [v for v in model.trainable_variables if id(v) not in owned]


def _other_float_state(model, parameters: list[GaussianMeanField]) -> list[tf.Variable]:
  """Non-trainable floating-point state outside the mean-field parameters (batch-norm moving
  statistics); the integer noise seeds and counters are seeded afresh instead."""
  owned = _owned_by(parameters)
  non_trainable = getattr(model, "non_trainable_variables", None)
  if non_trainable is None:
    trainable = {id(v) for v in model.trainable_variables}
    non_trainable = [v for v in model.variables if id(v) not in trainable]
  return [v for v in non_trainable if id(v) not in owned and v.dtype.is_floating]


def refinement_variables(members: tf.Module,
                         refit_deterministic: bool = False) -> list[tf.Variable]:
  """What refinement optimises: every mean-field posterior (the prior scales stay frozen), and
  with `refit_deterministic` the members' other trainable variables too."""
  parameters = mean_field_parameters(members)
  variables = [v for p in parameters for v in p.posterior_variables]
  if refit_deterministic:
    variables += _other_trainable_variables(members, parameters)
  return variables
