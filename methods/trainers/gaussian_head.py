"""Gaussian regression heads and their likelihood, shared by the UCI networks and the bandit's
reward models.

Regression networks output [M?, batch, 2]: the predictive mean and standard
deviation of the target. `HomoscedasticNoise` supplies the second column from
one learned scale per member (a point estimate trained with the ELBO, like the
empirical-Bayes prior scales, and frozen during refinement); a heteroscedastic
network (deep ensembles) predicts it per input.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras

from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.parameters import inverse_softplus
from auxiliary_sampling.predictive import gaussian_log_likelihood

MINIMUM_SCALE = 1e-3   # of a standardised target; keeps early steps finite


class HomoscedasticNoise(tf_keras.layers.Layer):
  """Appends a noise scale, softplus(u) + MINIMUM_SCALE, to a [M?, batch, 1] mean.

  `learned=True`: u is a trainable point estimate starting at `initial_scale`; `learned=False`:
  the scale stays `initial_scale` (u is a non-trainable variable, so no optimiser moves it).
  """

  def __init__(self, num_members: Optional[int] = None, initial_scale: float = 1.0,
               learned: bool = True, **kwargs):
    super().__init__(**kwargs)
    if not initial_scale > MINIMUM_SCALE:
      raise ValueError(f"initial_scale={initial_scale!r} must be > {MINIMUM_SCALE}")
    self.num_members = num_members
    self.initial_scale = initial_scale
    self.learned = learned

  def build(self, input_shape):
    shape = [1] if self.num_members is None else [self.num_members, 1]
    value = inverse_softplus(self.initial_scale - MINIMUM_SCALE)
    self.untransformed_noise_scale = self.add_weight(
        name="untransformed_noise_scale", shape=shape,
        initializer=tf_keras.initializers.Constant(value), trainable=self.learned)
    super().build(input_shape)

  @property
  def noise_scale(self) -> tf.Tensor:
    return tf.nn.softplus(self.untransformed_noise_scale) + MINIMUM_SCALE

  @no_autograph
  def call(self, mean):
    scale = self.noise_scale
    if self.num_members is not None:
      scale = scale[:, tf.newaxis, :]
    return tf.concat([mean, tf.broadcast_to(scale, tf.shape(mean))], axis=-1)


def gaussian_head_log_likelihood(labels, outputs) -> tf.Tensor:
  """log N(y | mean, scale^2) per example for [M?, batch, 2] outputs and [(M,) batch, 1] labels."""
  return gaussian_log_likelihood(labels[..., 0], outputs[..., 0], outputs[..., 1])
