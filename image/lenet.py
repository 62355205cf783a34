"""LeNet-5 as in the authors' code, in the three parameterisations Table 2 compares.

Convolutions of 6, 16 and 120 filters of 5x5 (SAME padding, ReLU), 2x2
max-pooling after the first two, then dense layers of 84 (ReLU) and 10 units
giving logits. The mean-field version has Flipout convolutions and local-
reparameterisation dense layers over Gaussian mean-field weights (refinable);
the MNF version has MNF layers; the ensemble version has M independent
point-estimate members on a leading member axis. Every version maps
[batch, H, W, C] images to logits: [batch, 10], or [M, batch, 10] with members.
"""
from __future__ import annotations

from typing import Optional

from auxiliary_sampling.layers import (Conv2DFlipout, DenseReparameterization, FlattenImage,
                                       LayerChain, MaxPool2D)
from auxiliary_sampling.noise import derived_seed
from auxiliary_sampling.parameters import INITIAL_UNTRANSFORMED_POSTERIOR_SCALE
from methods.trainers.deep_ensemble import MemberConv2D, MemberDense
from methods import network_kinds
from methods.registry import Networks
from methods.trainers.mnf import Conv2DMNF, DenseMNF
from common.mixed_precision import network_precision
from image.config import ENSEMBLE_KERNEL_INITIALIZERS, ImageConfig

CONV_FILTERS = (6, 16, 120)
KERNEL_SIZE = 5
POOLED_CONVOLUTIONS = 2
HIDDEN_UNITS = 84


def _lenet(conv, dense, num_classes: int) -> LayerChain:
  """LeNet-5 from `conv(filters, index)` and `dense(units, activation, index)` layer factories."""
  layers = []
  for index, filters in enumerate(CONV_FILTERS):
    layers.append(conv(filters, index))
    if index < POOLED_CONVOLUTIONS:
      layers.append(MaxPool2D(2))
  layers.append(FlattenImage())
  layers.append(dense(HIDDEN_UNITS, "relu", len(CONV_FILTERS)))
  layers.append(dense(num_classes, None, len(CONV_FILTERS) + 1))
  return LayerChain(layers, name="lenet5")


def mean_field_lenet5(
    num_members: Optional[int] = None, num_classes: int = 10, empirical_bayes_prior: bool = True,
    untransformed_scale_init: float = INITIAL_UNTRANSFORMED_POSTERIOR_SCALE,
    prior_scale: float = 1.0) -> LayerChain:
  """Flipout convolutions and local-reparameterisation dense layers (paper Section 4.3).

  Posterior scales start at softplus(`untransformed_scale_init`) (the authors' code: -7); priors
  N(0, `prior_scale`^2), the scale learned per tensor with `empirical_bayes_prior`.
  """
  common = dict(num_members=num_members, trainable_prior_scale=empirical_bayes_prior,
                untransformed_scale_init=untransformed_scale_init, prior_scale=prior_scale)
  return _lenet(
      lambda filters, _: Conv2DFlipout(filters, KERNEL_SIZE, padding="SAME", activation="relu", **
                                       common),
      lambda units, activation, _: DenseReparameterization(
          units, activation=activation, kernel_initializer="he_normal"
          if activation else "glorot_uniform", **common), num_classes)


def mnf_lenet5(seed: int = 0, num_classes: int = 10) -> LayerChain:
  """LeNet-5 with multiplicative-normalizing-flow layers (default flow settings)."""
  return _lenet(
      lambda filters, index: Conv2DMNF(filters, KERNEL_SIZE, padding="SAME", activation="relu",
                                       seed=derived_seed(seed, index)),
      lambda units, activation, index: DenseMNF(
          units, activation=activation, seed=derived_seed(seed, index),
          kernel_initializer="he_normal" if activation else "glorot_uniform"),
      num_classes)


def ensemble_lenet5(num_members: int = 10, seed: int = 0, num_classes: int = 10,
                    kernel_initializer: str = "glorot_uniform") -> LayerChain:
  """`num_members` deterministic LeNet-5s, each with its own initialisation.

  `kernel_initializer` initialises the ReLU layers' kernels (the output layer is
  always Glorot-uniform): "glorot_uniform", the Keras default that
  uncertainty-baselines' ensemble (the paper's) uses, or "he_normal" as in the
  suite's other LeNet-5s.
  """
  if kernel_initializer not in ENSEMBLE_KERNEL_INITIALIZERS:
    raise ValueError(f"unknown kernel_initializer {kernel_initializer!r}; "
                     f"allowed: {', '.join(ENSEMBLE_KERNEL_INITIALIZERS)}")
  return _lenet(
      lambda filters, index:
      MemberConv2D(filters, KERNEL_SIZE, num_members, padding="SAME", activation="relu",
                   kernel_initializer=kernel_initializer, seed=derived_seed(seed, index)),
      lambda units, activation, index: MemberDense(
          units, num_members, activation=activation, seed=derived_seed(seed, index),
          kernel_initializer=kernel_initializer if activation else "glorot_uniform"), num_classes)


def lenet5_networks(config: ImageConfig, num_classes: int) -> Networks:
  """LeNet-5 for every method: mean-field VI, MNF and the deterministic ensemble.

  With `config.use_bfloat16` the mean-field and ensemble networks compute in
  bfloat16 (`common.mixed_precision`); MNF stays float32 (ImageConfig refuses
  the combination).
  """
  def mean_field(num_members):
    with network_precision(config.use_bfloat16):
      prior_scale, learned = config.mean_field_prior()
      return mean_field_lenet5(num_members, num_classes, learned,
                               config.initial_untransformed_posterior_scale, prior_scale)

  def ensemble(num_members):
    with network_precision(config.use_bfloat16):
      return ensemble_lenet5(num_members, config.seed, num_classes,
                             config.ensemble_kernel_initializer)

  return Networks(builders={network_kinds.MEAN_FIELD: mean_field,
                            network_kinds.MNF: lambda: mnf_lenet5(config.seed, num_classes),
                            network_kinds.ENSEMBLE: ensemble})
