"""LeNet-5 in its three parameterisations and the member-axis layers it is built from."""
import numpy as np
import pytest
import tensorflow as tf

from auxiliary_sampling.layers import FlattenImage, MaxPool2D
from auxiliary_sampling.model_parameters import mean_field_parameters, model_kl
from auxiliary_sampling.predictive import categorical_log_likelihood
from methods.trainers.deep_ensemble import MemberConv2D
from methods.trainers.mnf import mnf_kl, train_mnf
from methods.trainers.vi import train_mean_field
from image import lenet


def _weights(height, channels):
  """Weights and biases of LeNet-5 on height x height x channels images.

  SAME padding, two 2x2 poolings.
  """
  flat = (height // 4) ** 2 * 120
  return ((25 * channels * 6 + 6) + (25 * 6 * 16 + 16) + (25 * 16 * 120 + 120) + (flat * 84 + 84) +
          (84 * 10 + 10))


@pytest.mark.parametrize("height,channels", [(28, 1), (32, 3)])
def test_mean_field_lenet5_has_the_papers_architecture(height, channels):
  model = lenet.mean_field_lenet5()
  images = tf.zeros([2, height, height, channels])
  assert model(images).shape == (2, 10)
  sizes = [int(np.prod(p.event_shape)) for p in mean_field_parameters(model)]
  assert sum(sizes) == _weights(height, channels)
  assert len(sizes) == 10      # kernel and bias of five layers, all Bayesian
  members = lenet.mean_field_lenet5(num_members=3)
  assert members(images).shape == (3, 2, 10)
  # Posterior scales start at softplus(-7), the authors' code, unless told otherwise.
  for p in mean_field_parameters(model):
    assert np.allclose(p.posterior_scale.numpy(), np.log1p(np.exp(-7.0)), rtol=1e-5)
  wider = lenet.mean_field_lenet5(untransformed_scale_init=-4.0)
  wider(images)
  for p in mean_field_parameters(wider):
    assert np.allclose(p.posterior_scale.numpy(), np.log1p(np.exp(-4.0)), rtol=1e-5)


def test_pooling_and_flattening_act_per_member():
  x = tf.random.stateless_normal([3, 2, 8, 8, 4], seed=[0, 1])
  pooled = MaxPool2D(2)(x)
  for m in range(3):
    np.testing.assert_allclose(pooled[m], tf.nn.max_pool2d(x[m], 2, 2, "VALID"))
  assert FlattenImage()(pooled).shape == (3, 2, 64)
  assert FlattenImage()(pooled[0]).shape == (2, 64)


def test_member_convolution_is_each_members_own_convolution():
  layer = MemberConv2D(5, 3, num_members=3, seed=1)
  x = tf.random.stateless_normal([3, 2, 6, 6, 4], seed=[0, 2])
  outputs = layer(x)
  for m in range(3):
    expected = tf.nn.conv2d(x[m], layer.kernel[m], 1, "SAME") + layer.bias[m]
    np.testing.assert_allclose(outputs[m], expected, rtol=1e-5, atol=1e-5)
  assert not np.allclose(layer.kernel[0], layer.kernel[1])  # members are initialised independently


def test_ensemble_takes_grey_scale_images_with_a_member_axis():
  """Regression: Keras Sequential squeezed the trailing channel axis of [M, B, 28, 28, 1] inputs."""
  model = lenet.ensemble_lenet5(num_members=2, seed=0)
  assert model(tf.zeros([5, 28, 28, 1])).shape == (2, 5, 10)
  per_member = tf.random.stateless_normal([2, 5, 28, 28, 1], seed=[3, 4])
  outputs = model(per_member)
  np.testing.assert_allclose(outputs[1], model(per_member[1])[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("initializer", lenet.ENSEMBLE_KERNEL_INITIALIZERS)
def test_ensemble_kernels_have_the_chosen_initialisers_scale(initializer):
  """He-normal: std sqrt(2 / fan_in); Glorot-uniform: sqrt(2 / (fan_in + fan_out)).

  The output layer is Glorot.
  """
  model = lenet.ensemble_lenet5(num_members=3, seed=1, kernel_initializer=initializer)
  model(tf.zeros([1, 28, 28, 1]))
  kernels = [layer.kernel for layer in model.chain if hasattr(layer, "kernel")]
  assert len(kernels) == 5
  for index, kernel in enumerate(kernels):
    receptive_field = int(np.prod(kernel.shape[1:-2]))
    fan_in, fan_out = receptive_field * kernel.shape[-2], receptive_field * kernel.shape[-1]
    glorot = initializer == "glorot_uniform" or index == len(kernels) - 1
    expected = np.sqrt(2.0 / (fan_in + fan_out)) if glorot else np.sqrt(2.0 / fan_in)
    member_stds = np.std(kernel.numpy().reshape(3, -1), axis=1)
    # The smallest layer (6 x 25 weights per member) gets a wider tolerance.
    np.testing.assert_allclose(member_stds, expected, rtol=0.25 if index == 0 else 0.08)
    assert not np.allclose(kernel[0], kernel[1])


def test_ensemble_initializer_names_are_checked():
  with pytest.raises(
      ValueError,
      match="unknown kernel_initializer 'orthogonal'; allowed: he_normal, glorot_uniform"):
    lenet.ensemble_lenet5(kernel_initializer="orthogonal")


def test_mnf_lenet5_gives_logits_and_a_finite_bound_term():
  model = lenet.mnf_lenet5(seed=0)
  assert model(tf.zeros([2, 28, 28, 1])).shape == (2, 10)
  kl = mnf_kl(model)
  assert np.isfinite(kl.numpy()) and kl.numpy() > 0


def _pattern_images(num_examples: int = 96, size: int = 12, num_classes: int = 3):
  """Noisy grey-scale images whose class is the brightest of `num_classes` horizontal bands."""
  rng = np.random.default_rng(11)
  labels = rng.integers(0, num_classes, num_examples)
  images = rng.normal(0.0, 0.3, [num_examples, size, size, 1]).astype(np.float32)
  band = size // num_classes
  for index, label in enumerate(labels):
    images[index, label * band:(label + 1) * band] += 1.5
  return images, labels.astype(np.int32)


def _every_variable_has_a_gradient(model, images, labels, kl_fn):
  with tf.GradientTape() as tape:
    loss = -tf.reduce_sum(categorical_log_likelihood(labels, model(images))) + kl_fn()
  gradients = tape.gradient(loss, model.trainable_variables)
  return [variable.name for variable, gradient in zip(model.trainable_variables, gradients)
          if gradient is None or not np.any(gradient.numpy())]


def test_every_mean_field_lenet5_parameter_trains_and_the_kl_falls():
  """The TF2 trap (a scale frozen at build time) on the image model: every posterior loc,
  posterior scale and learned prior scale of every layer gets a gradient, the scales move and the
  KL falls in training."""
  images, labels = _pattern_images()
  model = lenet.mean_field_lenet5(num_classes=3)
  model(images[:1])
  parameters = mean_field_parameters(model)
  assert len(parameters) == 10 and len(model.trainable_variables) == 3 * len(parameters)
  assert not _every_variable_has_a_gradient(model, images, labels, lambda: model_kl(model))
  scales_before = [p.posterior_scale.numpy() for p in parameters]
  priors_before = [p.prior_scale.numpy() for p in parameters]
  result = train_mean_field(model, images, labels, categorical_log_likelihood, num_steps=300,
                            learning_rate=1e-2, batch_size=32)
  assert result.kl_trace[-20:].mean() < 0.5 * result.kl_trace[:20].mean()
  assert result.trace[-20:].mean() > result.trace[:20].mean()
  for index, (before, prior_before,
              parameter) in enumerate(zip(scales_before, priors_before, parameters)):
    assert np.mean(np.abs(parameter.posterior_scale.numpy() - before)) > 1e-4, index
    assert not np.allclose(parameter.prior_scale.numpy(), prior_before), index


def test_every_mnf_lenet5_variable_trains_and_the_bound_improves():
  """MNF LeNet-5: the weights, the multiplicative noise's flow and the auxiliary reverse model all
  get gradients, and training lowers the KL term and raises the bound."""
  images, labels = _pattern_images()
  model = lenet.mnf_lenet5(seed=0, num_classes=3)
  model(images[:1])
  assert not _every_variable_has_a_gradient(model, images, labels, lambda: mnf_kl(model))
  result = train_mnf(model, images, labels, categorical_log_likelihood, num_steps=150,
                     learning_rate=1e-2, batch_size=32)
  assert result.kl_trace[-20:].mean() < result.kl_trace[:20].mean()
  assert result.trace[-20:].mean() > result.trace[:20].mean()


@pytest.mark.parametrize("build", [
    lambda: lenet.mean_field_lenet5(3), lambda: lenet.ensemble_lenet5(3, seed=1)])
def test_bfloat16_lenet5_computes_in_bfloat16_and_agrees_with_float32(build):
  """--use_bfloat16: float32 variables, bfloat16 arithmetic, float32 likelihood and gradients.

  Catches: the policy leaking past the network's construction (every later
  model silently bfloat16), logits reaching the softmax in bfloat16, a layer
  that reads its variables in float32 and so never computes in bfloat16.
  """
  from common.mixed_precision import network_precision
  from tf_keras import mixed_precision
  images = tf.random.stateless_normal([8, 28, 28, 1], seed=[1, 2])
  labels = tf.range(8) % 10
  reference = build()
  reference(images)
  with network_precision(True):
    model = build()
  assert mixed_precision.global_policy().name == "float32"
  model(images)
  for target, source in zip(model.variables, reference.variables):
    assert target.dtype == source.dtype   # float32 variables (int64 noise counters)
    target.assign(source)
  logits = model(images)
  assert logits.dtype == tf.bfloat16
  reference_logits = reference(images)
  # bfloat16 keeps 8 significant bits: logits agree to about 1 % of their spread.
  spread = float(tf.math.reduce_std(reference_logits))
  difference = tf.abs(tf.cast(logits, tf.float32) - reference_logits)
  assert float(tf.reduce_max(difference)) < 0.05 * spread
  with tf.GradientTape() as tape:
    log_likelihood = categorical_log_likelihood(labels, model(images))
    # The prior scales enter only the KL (float32: computed outside the layers' calls).
    kl = model_kl(model) if mean_field_parameters(model) else tf.zeros([3])
    objective = tf.reduce_sum(log_likelihood) - tf.reduce_sum(kl)
  assert log_likelihood.dtype == tf.float32 and kl.dtype == tf.float32
  gradients = tape.gradient(objective, model.trainable_variables)
  assert all(g is not None and g.dtype == tf.float32 and np.all(np.isfinite(g.numpy()))
             for g in gradients)
