"""ResNet v1 for CIFAR-10 (He et al. 2016) as the paper's authors built ResNet-20 (edward2:
experimental/auxiliary_sampling), of any depth 6n + 2 (20 by default, the paper's).

A 3x3 stem convolution of 16 filters, 3 stacks of n residual blocks of 16,
32 and 64 filters (n = 3 in ResNet-20; the first block of stacks 2 and 3 has stride 2 and a 1x1
projection shortcut), 3x3 SAME convolutions, the activation after the
residual addition, global average pooling (8x8 on CIFAR-10's 32x32 images)
and a dense head over the classes. Which convolutions are Bayesian:
  none     every convolution deterministic, ReLU (the deep-ensemble members);
  hybrid   the second convolution of every block (Flipout, Gaussian mean
           field), SELU;
  full     both convolutions of every block, SELU.
The stem and the projection shortcuts stay deterministic (the authors put an
L2 penalty of 1e-4 on them, `deterministic_kernels` lists them for it) and
the head is Bayesian (local reparameterisation) in the variational models.
Bayesian posterior means start from the "fixup" initialisation, He-normal
scaled by depth^(-1/4). `batchnorm` puts batch normalisation after every
block convolution (not the stem or the shortcuts), per member.

Every layer takes an optional member axis (`num_members`): the stacked
networks refinement and ensembles train; deterministic layers and batch norm
then hold one copy per member, as the authors' refinement refits every
variable of each sample.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import tensorflow as tf
import tf_keras

from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.layers import Conv2DFlipout, DenseReparameterization
from auxiliary_sampling.model_parameters import layers_of
from auxiliary_sampling.noise import derived_seed
from auxiliary_sampling.parameters import INITIAL_UNTRANSFORMED_POSTERIOR_SCALE
from methods.trainers.batch_norm import MemberBatchNormalization
from methods.trainers.deep_ensemble import MemberConv2D, MemberDense
from methods import network_kinds
from methods.registry import Networks
from resnet.config import DEPTH, blocks_per_stack

if TYPE_CHECKING:
  from resnet.config import ResNetConfig

VARIATIONAL_MODES = ("none", "hybrid", "full")
STACK_FILTERS = (16, 32, 64)


def fixup_initializer(depth: int = DEPTH) -> tf_keras.initializers.Initializer:
  """He-normal scaled by depth^(-1/4) (Zhang et al. 2019): a variance scaling of 2 / sqrt(depth)."""
  return tf_keras.initializers.VarianceScaling(scale=2.0 / depth**0.5, mode="fan_in",
                                               distribution="truncated_normal")


class _ResNetParts:
  """Builds the layers of one ResNet in construction order (which fixes seeds and pairing)."""

  def __init__(self, variational: str, batchnorm: bool, num_members: Optional[int], seed: int,
               empirical_bayes_prior: bool, untransformed_scale_init: float, depth: int):
    if variational not in VARIATIONAL_MODES:
      raise ValueError(f"unknown variational mode {variational!r}; allowed: "
                       f"{', '.join(VARIATIONAL_MODES)}")
    self.variational, self.batchnorm, self.num_members = variational, batchnorm, num_members
    self.seed, self.count, self.depth = seed, 0, depth
    self.bayesian = dict(num_members=num_members, trainable_prior_scale=empirical_bayes_prior,
                         untransformed_scale_init=untransformed_scale_init)
    self.activation = "relu" if variational == "none" else "selu"

  def _next_seed(self) -> int:
    self.count += 1
    return derived_seed(self.seed, self.count)

  def conv(self, filters: int, kernel_size: int, strides: int, bayesian: bool):
    if bayesian:
      return Conv2DFlipout(filters, kernel_size, strides=strides, padding="SAME",
                           kernel_initializer=fixup_initializer(self.depth), **self.bayesian)
    return MemberConv2D(filters, kernel_size, self.num_members, strides=strides, padding="SAME",
                        kernel_initializer="he_normal", seed=self._next_seed())

  def norm(self) -> Optional[MemberBatchNormalization]:
    return MemberBatchNormalization(self.num_members) if self.batchnorm else None

  def head(self, num_classes: int):
    if self.variational == "none":
      return MemberDense(num_classes, self.num_members, kernel_initializer="glorot_uniform",
                         seed=self._next_seed()) if self.num_members else tf_keras.layers.Dense(
                             num_classes, kernel_initializer="glorot_uniform")
    return DenseReparameterization(num_classes, kernel_initializer="glorot_uniform",
                                   **self.bayesian)


class ResidualBlock(tf_keras.layers.Layer):
  """conv -> (BN) -> act -> conv -> (BN), plus the (projected) input, then act."""

  def __init__(self, parts: _ResNetParts, filters: int, strides: int, **kwargs):
    super().__init__(**kwargs)
    self.first = parts.conv(filters, 3, strides, bayesian=parts.variational == "full")
    self.first_norm = parts.norm()
    self.second = parts.conv(filters, 3, 1, bayesian=parts.variational in ("hybrid", "full"))
    self.second_norm = parts.norm()
    self.shortcut = parts.conv(filters, 1, strides, bayesian=False) if strides != 1 else None
    self.activation = tf_keras.activations.get(parts.activation)

  @no_autograph
  def call(self, inputs, training=None):
    outputs = self.first(inputs)
    if self.first_norm is not None:
      outputs = self.first_norm(outputs, training=training)
    outputs = self.second(self.activation(outputs))
    if self.second_norm is not None:
      outputs = self.second_norm(outputs, training=training)
    shortcut = inputs if self.shortcut is None else self.shortcut(inputs)
    return self.activation(shortcut + outputs)


class ResNet(tf_keras.layers.Layer):
  """[M?, B, H, W, C] images -> [M?, B, num_classes] logits (see the module docstring); `depth`
  6n + 2 layers (20: ResNet-20)."""

  def __init__(self, variational: str = "hybrid", batchnorm: bool = False,
               num_members: Optional[int] = None, num_classes: int = 10, seed: int = 0,
               empirical_bayes_prior: bool = True,
               untransformed_scale_init: float = INITIAL_UNTRANSFORMED_POSTERIOR_SCALE,
               depth: int = DEPTH, **kwargs):
    super().__init__(**kwargs)
    num_blocks = blocks_per_stack(depth)
    parts = _ResNetParts(variational, batchnorm, num_members, seed, empirical_bayes_prior,
                         untransformed_scale_init, depth)
    self.variational, self.num_members = variational, num_members
    self.stem = parts.conv(STACK_FILTERS[0], 3, 1, bayesian=False)
    self.blocks = [
        ResidualBlock(parts, filters, 2 if stack > 0 and block == 0 else 1)
        for stack, filters in enumerate(STACK_FILTERS) for block in range(num_blocks)]
    self.head = parts.head(num_classes)
    self.activation = tf_keras.activations.get(parts.activation)

  @no_autograph
  def call(self, inputs, training=None):
    outputs = self.activation(self.stem(inputs))
    for block in self.blocks:
      outputs = block(outputs, training=training)
    return self.head(tf.reduce_mean(outputs, axis=[-3, -2]))   # global average pooling

  @property
  def deterministic_kernels(self) -> list[tf.Variable]:
    """Kernels of the deterministic convolutions (stem, shortcuts; all in `none`): the L2 set."""
    return [layer.kernel for layer in layers_of(self) if isinstance(layer, MemberConv2D)]


def l2_penalty(model: ResNet, weight: float = 1e-4) -> tf.Tensor:
  """weight * sum of squared deterministic kernels, per member ([M] or scalar): the authors' L2."""
  total = None
  for kernel in model.deterministic_kernels:
    axes = list(range(1 if model.num_members else 0, kernel.shape.rank))
    term = tf.reduce_sum(tf.square(kernel), axis=axes)
    total = term if total is None else total + term
  return weight * total


def resnet_networks(config: "ResNetConfig", num_classes: int) -> Networks:
  """The ResNet of --depth (ResNet-20 in Table 3) for every method: the configured variational
  variant for the VI family, deterministic ReLU members for the ensemble, both with the L2 of
  their deterministic kernels."""
  def mean_field(num_members):
    return ResNet(config.variational, config.batchnorm, num_members, num_classes,
                  seed=config.seed, empirical_bayes_prior=config.empirical_bayes_prior,
                  untransformed_scale_init=config.initial_untransformed_posterior_scale,
                  depth=config.depth)

  def ensemble(num_members):
    return ResNet("none", config.batchnorm, num_members, num_classes, seed=config.seed,
                  depth=config.depth)

  if config.l2 > 0:
    def penalty(model):
      return l2_penalty(model, config.l2)
  else:
    penalty = None
  return Networks(builders={network_kinds.MEAN_FIELD: mean_field, network_kinds.ENSEMBLE: ensemble},
                  penalty=penalty)
