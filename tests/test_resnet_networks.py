"""ResNet-20 v1 in its three variational modes, other depths, and batch norm with a member axis."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop
from auxiliary_sampling.model_parameters import mean_field_parameters, model_kl
from auxiliary_sampling.predictive import categorical_log_likelihood
from methods.trainers.batch_norm import MemberBatchNormalization
from resnet.config import DEPTH
from resnet.networks import ResNet, fixup_initializer, l2_penalty

IMAGES = tf.random.stateless_normal([6, 32, 32, 3], seed=[0, 1])


def test_the_deterministic_resnet20_has_the_papers_size_and_shapes():
  """0.27M weights (He et al. 2016's ResNet-20 for CIFAR-10); 8x8 maps pooled into the head."""
  model = ResNet("none", batchnorm=False)
  assert model(IMAGES).shape == (6, 10)
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 271_690
  # 3 (stem) + 18 block convs + 2 shortcuts: 21 deterministic convolutions.
  assert len(model.deterministic_kernels) == 21
  assert ResNet("none")(IMAGES[:, :28, :28, :1]).shape == (6, 10)   # Fashion-MNIST's images


@pytest.mark.parametrize("depth,blocks", [(8, 1), (32, 5)])
def test_a_resnet_of_depth_6n_plus_2_has_n_blocks_per_stack(depth, blocks):
  """The smaller and larger members of He et al.'s CIFAR family: 6n block convolutions, of which
  the hybrid mode makes every second Bayesian, the two projection shortcuts, the fixup scale of
  their depth. Catches: --depth not reaching the blocks, or the fixup scale kept at ResNet-20's."""
  model = ResNet("hybrid", depth=depth)
  assert model(IMAGES).shape == (6, 10)
  assert len(model.blocks) == 3 * blocks
  assert len(mean_field_parameters(model)) == 2 * 3 * blocks + 2
  assert len(model.deterministic_kernels) == 1 + 3 * blocks + 2
  bayesian = model.blocks[0].second.kernel_initializer
  assert bayesian.scale == pytest.approx(2.0 / depth**0.5)


@pytest.mark.parametrize("depth", [2, 7, 21, 8.0, True])
def test_a_depth_that_is_not_6n_plus_2_is_refused(depth):
  with pytest.raises(ValueError, match=f"depth={depth!r} is not a ResNet depth; allowed: 6n"):
    ResNet("hybrid", depth=depth)


@pytest.mark.parametrize("mode,bayesian_convs,deterministic_convs", [
    ("hybrid", 9, 12), ("full", 18, 3)])
def test_the_variational_modes_make_the_authors_layers_bayesian(mode, bayesian_convs,
                                                                deterministic_convs):
  """hybrid: each block's second conv; full: both; the stem and shortcuts stay deterministic."""
  model = ResNet(mode)
  model(IMAGES)
  parameters = mean_field_parameters(model)
  # A kernel and a bias per Bayesian conv, plus the Bayesian head's kernel and bias.
  assert len(parameters) == 2 * bayesian_convs + 2
  assert [p.event_shape for p in parameters[-2:]] == [(64, 10), (10,)]
  assert len(model.deterministic_kernels) == deterministic_convs
  kernel_shapes = [tuple(k.shape) for k in model.deterministic_kernels]
  assert kernel_shapes[0] == (3, 3, 3, 16) and (1, 1, 16, 32) in kernel_shapes


def test_fixup_initialisation_is_he_normal_scaled_by_depth_to_the_minus_quarter():
  kernel = fixup_initializer()([3, 3, 64, 512], tf.float32)
  he_std = np.sqrt(2.0 / (3 * 3 * 64))
  np.testing.assert_allclose(float(tf.math.reduce_std(kernel)), he_std * DEPTH**-0.25, rtol=0.02)


def _copy_member(stacked, single, member: int) -> None:
  for target, source in zip(single.variables, stacked.variables):
    target.assign(source[member] if source.shape.rank == target.shape.rank + 1 else source)


@pytest.mark.parametrize("training", [True, False])
def test_a_member_network_is_its_members_each_alone(training):
  """M stacked ResNets (batch norm included) compute what M separate ResNets compute.

  Catches: batch statistics pooled over members, a member's strided conv or
  shortcut applied with another member's kernel.
  """
  stacked = ResNet("none", batchnorm=True, num_members=3, seed=4)
  stacked(IMAGES, training=True)   # moves the moving averages away from their start
  outputs = stacked(IMAGES, training=training)
  for member in range(3):
    single = ResNet("none", batchnorm=True, seed=99)
    single(IMAGES)
    _copy_member(stacked, single, member)
    np.testing.assert_allclose(outputs[member], single(IMAGES, training=training), rtol=1e-4,
                               atol=1e-4)


def test_member_batch_norm_matches_keras_batch_norm():
  """Per member: Keras's batch statistics, its (unbiased) moving averages, its inference output."""
  x = tf.random.stateless_normal([2, 8, 5, 5, 4], seed=[3, 4]) * 3.0 + 1.0
  ours = MemberBatchNormalization(num_members=2)
  training_outputs = ours(x, training=True)
  for member in range(2):
    keras = tf_keras.layers.BatchNormalization()
    np.testing.assert_allclose(training_outputs[member], keras(x[member], training=True),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours.moving_mean[member], keras.moving_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.moving_variance[member], keras.moving_variance, rtol=1e-5)
    np.testing.assert_allclose(ours(x, training=False)[member], keras(x[member], training=False),
                               rtol=1e-4, atol=1e-5)


def test_l2_penalty_is_per_member():
  stacked = ResNet("hybrid", num_members=2, seed=1)
  stacked(IMAGES)
  penalty = l2_penalty(stacked)
  for member in range(2):
    expected = 1e-4 * sum(float(tf.reduce_sum(tf.square(k[member])))
                          for k in stacked.deterministic_kernels)
    np.testing.assert_allclose(penalty[member], expected, rtol=1e-5)


def test_every_variational_parameter_trains_and_the_kl_falls():
  """The TF2 trap: scales derived once from softplus(variable) freeze; every parameter must move.

  On the full variational ResNet, which has every kind of variable the hybrid one has (Flipout
  convolutions, strided ones too, deterministic convolutions, batch norm, the Bayesian head).
  """
  images = tf.random.stateless_normal([64, 16, 16, 3], seed=[5, 6])
  labels = tf.range(64) % 10
  model = ResNet("full", batchnorm=True, untransformed_scale_init=-3.0, depth=8)
  model(images[:1])
  before = [v.numpy().copy() for v in model.trainable_variables]
  kl_before = float(model_kl(model))
  loop = TrainingLoop(ElboObjective(model, categorical_log_likelihood),
                      GradientUpdate(Adam(model.trainable_variables)),
                      UniformBatches(images, labels, 16))
  trace = loop.maximize(15, 1e-2)
  assert np.all(np.isfinite(trace))
  moved = [not np.allclose(v.numpy(), b) for v, b in zip(model.trainable_variables, before)]
  assert all(moved), [v.name for v, m in zip(model.trainable_variables, moved) if not m]
  assert float(model_kl(model)) < kl_before
