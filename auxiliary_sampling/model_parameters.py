"""A model's Gaussian mean-field parameters, their KL and member axis, found through its layers.

Parameters are listed in one fixed order, the layers' construction order
(depth first): it decides which random stream refinement gives each
parameter and how a trained model's parameters pair up with a copy's.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras

from auxiliary_sampling.parameters import GaussianMeanField


def layers_of(model: tf.Module) -> list[tf.Module]:
  """The model and every layer in it, depth first in construction order.

  Keras's own traversal, `_flatten_layers`, is private, but the public
  `tf.Module.submodules` lists a module's children breadth first by attribute
  name: for Sequential([LayerChain([a, b]), c]) it gives c before a and b,
  which would reorder the random streams and the parameter pairing (tested).
  Plain `tf.Module` models (no Keras) are listed by `submodules`.
  """
  if isinstance(model, tf_keras.layers.Layer):
    return [model] + list(model._flatten_layers(include_self=False, recursive=True))
  return list(model.submodules)


def mean_field_parameters(model: tf.Module) -> list[GaussianMeanField]:
  """All Gaussian mean-field parameters of a model, each once, in layer then construction order."""
  found, seen = [], set()
  for layer in layers_of(model):
    for parameter in getattr(layer, "mean_field_parameters", []):
      if id(parameter) not in seen:
        seen.add(id(parameter))
        found.append(parameter)
  return found


def model_kl(model: tf.Module) -> tf.Tensor:
  """KL(q(w) || p(w | a_1..k)) of the whole model (the KL of paper Eq. 4), one per member."""
  parameters = mean_field_parameters(model)
  if not parameters:
    name = getattr(model, "name", model)
    raise ValueError(f"model {name!r} has no Gaussian mean-field parameters")
  return tf.add_n([p.kl_divergence() for p in parameters])


def num_members_of(model: tf.Module) -> Optional[int]:
  """The model's member-axis size (None without one); all parameters must agree."""
  sizes = {p.num_members for p in mean_field_parameters(model)}
  if len(sizes) != 1:
    raise ValueError(f"model mixes member-axis sizes {sorted(sizes, key=str)}")
  return sizes.pop()
