"""Bayesian layers.

Stochastic outputs with the right moments, exact KL, trainable scales, members.
"""
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras

from auxiliary_sampling.layers import (Conv2DFlipout, DenseReparameterization, FlattenImage,
                                       GaussianSample, LayerChain)
from auxiliary_sampling.member_convolution import grouped_conv_gradients_supported, member_conv2d
from auxiliary_sampling.model_parameters import mean_field_parameters, model_kl
from auxiliary_sampling.weight_noise import weight_noise_scope
from methods.trainers.vi import train_mean_field

tfd = tfp.distributions


def _randomise(layer, seed=0):
  rng = np.random.default_rng(seed)
  for p in layer.mean_field_parameters:
    p.posterior_loc.assign(rng.normal(size=p.posterior_loc.shape).astype(np.float32))
    p.untransformed_posterior_scale.assign(
        rng.uniform(-2, 0, size=p.posterior_loc.shape).astype(np.float32))
    p.untransformed_prior_scale.assign(
        rng.uniform(0, 1, size=p.untransformed_prior_scale.shape).astype(np.float32))


def _draws(layer, x, num_draws, **call_arguments):
  """`num_draws` calls of `layer` on `x`, stacked: one compiled loop, as the training loops call
  the layers (eager calls took ~10 ms each, most of these tests' time); an eager pair of calls
  must differ too."""
  @tf.function
  def draw_all():
    return tf.map_fn(lambda _: layer(x, **call_arguments), tf.range(num_draws),
                     fn_output_signature=tf.float32, parallel_iterations=1)
  draws = draw_all().numpy()
  assert not np.allclose(draws[0], draws[1])
  assert not np.allclose(layer(x, **call_arguments), layer(x, **call_arguments))
  return draws


def test_dense_outputs_are_stochastic_with_local_reparameterisation_moments():
  layer = DenseReparameterization(3)
  x = tf.constant(np.random.default_rng(0).normal(size=[4, 5]), tf.float32)
  layer(x)
  _randomise(layer)
  draws = _draws(layer, x, 4000)
  k, b = layer.kernel, layer.bias
  mean = x.numpy() @ k.posterior_loc.numpy() + b.posterior_loc.numpy()
  var = (x.numpy() ** 2) @ k.posterior_variance.numpy() + b.posterior_variance.numpy()
  assert draws.mean(0) == pytest.approx(mean, abs=4 * np.sqrt(var.max() / 4000))
  assert draws.var(0) == pytest.approx(var, rel=0.1)


def test_conv_flipout_moments_match_independent_weight_samples():
  layer = Conv2DFlipout(2, 3, padding="SAME")
  x = tf.constant(np.random.default_rng(1).normal(size=[2, 5, 5, 3]), tf.float32)
  layer(x)
  _randomise(layer, 1)
  draws = _draws(layer, x, 3000)
  k, b = layer.kernel, layer.bias
  mean = tf.nn.conv2d(x, k.posterior_loc, 1, "SAME").numpy() + b.posterior_loc.numpy()
  var = tf.nn.conv2d(x**2, k.posterior_variance, 1, "SAME").numpy() + b.posterior_variance.numpy()
  assert np.abs(draws.mean(0) - mean).max() < 5 * np.sqrt(var.max() / 3000)
  assert np.median(np.abs(draws.var(0) / var - 1)) < 0.05


def _closed_form_moments(layer, x):
  """Mean and variance of a linear mean-field layer's outputs (without a member axis)."""
  k, b = layer.kernel, layer.bias

  def apply(inputs, kernel):
    if isinstance(layer, DenseReparameterization):
      return tf.matmul(inputs, kernel)
    return tf.nn.conv2d(inputs, kernel, 1, "SAME")
  mean = apply(x, k.posterior_loc) + b.posterior_loc
  variance = apply(tf.square(x), k.posterior_variance) + b.posterior_variance
  return mean, variance


LINEAR_LAYERS = [(lambda: DenseReparameterization(3), [4, 5]),
                 (lambda: Conv2DFlipout(2, 3), [2, 5, 5, 3])]


@pytest.mark.parametrize("make,x_shape", LINEAR_LAYERS)
def test_per_batch_noise_shares_one_weight_draw_and_keeps_the_moments(make, x_shape):
  """per_batch: every example of a call sees the same weights.

  Over calls, the outputs have q's moments.
  """
  layer = make()
  rng = np.random.default_rng(5)
  x = tf.constant(rng.normal(size=x_shape), tf.float32)
  x = tf.concat([x, x[:1]], 0)   # the last example repeats the first
  layer(x)
  _randomise(layer, 5)
  draws = _draws(layer, x, 3000, weight_noise="per_batch")
  # Equal up to round-off: TensorFlow's CPU convolution without oneDNN sums in an order that
  # depends on the batch position, so equal examples can differ in the last bit.
  np.testing.assert_allclose(draws[:, 0], draws[:, -1], rtol=1e-6, atol=1e-6)
  mean, variance = (t.numpy() for t in _closed_form_moments(layer, x))
  assert np.abs(draws.mean(0) - mean).max() < 5 * np.sqrt(variance.max() / 3000)
  assert np.median(np.abs(draws.var(0) / variance - 1)) < 0.05
  # Without the argument, and outside any scope, the layer draws independent noise per example.
  outputs = layer(x).numpy()
  assert not np.allclose(outputs[0], outputs[-1])


def test_layers_in_a_container_take_the_mode_of_the_enclosing_scope():
  """Keras containers do not pass `weight_noise` down: their layers read the scope, then revert.

  Mutation: a scope that does not reset on exit leaves later calls per_batch.
  """
  model = tf_keras.Sequential([DenseReparameterization(3), DenseReparameterization(2)])
  x = tf.ones([4, 5])   # identical examples: equal outputs if and only if the weights are shared
  model(x)
  with weight_noise_scope("per_batch"):
    shared = model(x).numpy()
    explicit = model.layers[0](x, weight_noise="per_example").numpy()
  assert np.allclose(shared, shared[:1])
  assert not np.allclose(explicit, explicit[:1])   # an explicit argument overrides the scope
  independent = model(x).numpy()
  assert not np.allclose(independent, independent[:1])
  with pytest.raises(ValueError, match="unknown weight_noise 'shared'"):
    with weight_noise_scope("shared"):
      pass


@pytest.mark.parametrize("make,x_shape", LINEAR_LAYERS)
def test_both_weight_noise_modes_give_unbiased_gradients(make, x_shape):
  """The Monte Carlo gradient of sum(outputs^2) matches the gradient of its closed form.

  The closed form is sum(mean^2 + var).
  """
  layer = make()
  x = tf.constant(np.random.default_rng(6).normal(size=x_shape), tf.float32)
  layer(x)
  _randomise(layer, 6)
  variables = [v for p in layer.mean_field_parameters for v in p.posterior_variables]
  with tf.GradientTape() as tape:
    mean, variance = _closed_form_moments(layer, x)
    expected = tf.reduce_sum(tf.square(mean) + variance)
  exact = np.concatenate([g.numpy().ravel() for g in tape.gradient(expected, variables)])
  num_draws = 2000
  for mode in ("per_example", "per_batch"):
    @tf.function
    def draw_gradients():
      def one_draw(_):
        with tf.GradientTape() as tape:
          loss = tf.reduce_sum(tf.square(layer(x, weight_noise=mode)))
        return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, variables)], 0)
      return tf.map_fn(one_draw, tf.range(num_draws), fn_output_signature=tf.float32,
                       parallel_iterations=1)
    gradients = draw_gradients().numpy()
    standard_error = gradients.std(0) / np.sqrt(num_draws)
    z_scores = (gradients.mean(0) - exact) / np.maximum(standard_error, 1e-6)
    assert np.abs(z_scores).max() < 5, mode
  assert standard_error.max() > 0


@pytest.mark.parametrize("make,x_shape",
                         [(lambda m: DenseReparameterization(4, num_members=m), [3, 6]),
                          (lambda m: Conv2DFlipout(3, 3, num_members=m), [2, 6, 6, 2])])
def test_kl_equals_direct_computation(make, x_shape):
  layer = make(None)
  layer(tf.zeros(x_shape))
  _randomise(layer, 2)
  expected = 0.0
  for p in layer.mean_field_parameters:
    q = tfd.Normal(p.posterior_loc, tf.nn.softplus(p.untransformed_posterior_scale))
    prior = tfd.Normal(0.0, tf.nn.softplus(p.untransformed_prior_scale))
    expected += float(tf.reduce_sum(tfd.kl_divergence(q, prior)))
  assert float(layer.kl_divergence()) == pytest.approx(expected, rel=1e-5)


def test_members_are_independent_computations():
  """Member m of a member layer computes what a plain layer with member m's parameters computes."""
  members = 3
  x = tf.constant(np.random.default_rng(3).normal(size=[2, 7, 7, 2]), tf.float32)
  stacked = Conv2DFlipout(4, 3, num_members=members)
  stacked(x)
  _randomise(stacked, 3)
  for p in stacked.mean_field_parameters:  # deterministic: compare means exactly
    p.untransformed_posterior_scale.assign(tf.fill(p.posterior_loc.shape, -30.0))
  out = stacked(x).numpy()
  single = Conv2DFlipout(4, 3)
  single(x)
  for m in range(members):
    for source, target in zip(stacked.mean_field_parameters, single.mean_field_parameters):
      target.posterior_loc.assign(source.posterior_loc[m])
      target.untransformed_posterior_scale.assign(source.untransformed_posterior_scale[m])
    assert out[m] == pytest.approx(single(x).numpy(), abs=1e-4)
  # Member inputs [M, batch, ...] are accepted, and gradients do not cross members.
  member_inputs = tf.stack([x, 2 * x, 3 * x])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(stacked(member_inputs)[0]) + tf.reduce_sum(stacked.kl_divergence()[0])
  gradient = tape.gradient(loss, stacked.kernel.posterior_loc).numpy()
  assert np.abs(gradient[0]).sum() > 0 and np.all(gradient[1:] == 0)


@pytest.mark.parametrize("gradients", [None, "per_member", "grouped"])
@pytest.mark.parametrize("kernel_size, strides, padding", [(3, 1, "SAME"), (3, 2, "SAME"),
                                                           (1, 2, "VALID")])
def test_member_conv2d_gradients_are_each_members_own_conv2d_gradients(gradients, kernel_size,
                                                                       strides, padding):
  """The member convolution and both its gradients equal each member's own tf.nn.conv2d's, in a
  compiled function on this machine's default device.

  Catches the grouped convolution's gradients left to TensorFlow's default CPU
  kernels, which refuse them ('Gradients for grouped convolutions are not
  supported on CPU'; the kernel's: 'filter_size does not have enough
  elements'): ResNet-20's refined VI and deep ensemble stopped at their first
  step on CPUs where TensorFlow leaves oneDNN off (an AVX2-only AMD EPYC),
  though they ran where it is on (the Xeons of the committed runs). 'grouped'
  is skipped where this device cannot take those gradients.
  """
  if gradients == "grouped" and not grouped_conv_gradients_supported():
    pytest.skip("TensorFlow's kernels here take no gradients of a grouped convolution")
  rng = np.random.default_rng(5)
  members, batch, size, channels, filters = 3, 2, 7, 4, 5
  inputs = tf.constant(rng.normal(size=[members, batch, size, size, channels]), tf.float32)
  kernels = tf.constant(rng.normal(size=[members, kernel_size, kernel_size, channels, filters]),
                        tf.float32)
  out_size = -(-size // strides) if padding == "SAME" else (size - kernel_size) // strides + 1
  weights = tf.constant(rng.normal(size=[members, batch, out_size, out_size, filters]), tf.float32)

  @tf.function(autograph=False)
  def value_and_gradients(convolve):
    with tf.GradientTape() as tape:
      tape.watch([inputs, kernels])
      outputs = convolve(inputs, kernels)
      loss = tf.reduce_sum(weights * outputs)
    return (outputs,) + tuple(tape.gradient(loss, [inputs, kernels]))

  def each_member(inputs, kernels):
    return tf.stack([tf.nn.conv2d(inputs[m], kernels[m], strides, padding)
                     for m in range(members)])

  got = value_and_gradients(
      lambda x, k: member_conv2d(x, k, strides, padding, gradients=gradients))
  expected = value_and_gradients(each_member)
  for name, value, reference in zip(("outputs", "input gradient", "kernel gradient"), got,
                                    expected):
    assert value.numpy() == pytest.approx(reference.numpy(), rel=1e-5, abs=1e-4), name


def test_member_conv2d_forward_pass_does_not_depend_on_how_it_is_differentiated():
  """'per_member' changes the gradients' ops only: its outputs are the grouped op's bit for bit."""
  rng = np.random.default_rng(6)
  inputs = tf.constant(rng.normal(size=[2, 3, 6, 6, 3]), tf.float32)
  kernels = tf.constant(rng.normal(size=[2, 3, 3, 3, 4]), tf.float32)
  outputs = [member_conv2d(inputs, kernels, 1, "SAME", gradients=g).numpy()
             for g in ("grouped", "per_member")]
  assert np.array_equal(outputs[0], outputs[1])
  with pytest.raises(ValueError, match="gradients='eigen'"):
    member_conv2d(inputs, kernels, 1, "SAME", gradients="eigen")


def test_per_batch_members_draw_their_own_weights():
  """With a member axis, per_batch gives each member its own draw, shared by that member's batch."""
  for layer, x in [(DenseReparameterization(2, num_members=3), tf.ones([5, 4])),
                   (Conv2DFlipout(2, 3, num_members=3), tf.ones([5, 4, 4, 2]))]:
    layer(x)
    _randomise(layer, 7)
    for p in layer.mean_field_parameters:  # identical members
      p.posterior_loc.assign(tf.broadcast_to(p.posterior_loc[:1], p.posterior_loc.shape))
      p.untransformed_posterior_scale.assign(
          tf.broadcast_to(p.untransformed_posterior_scale[:1], p.posterior_loc.shape))
    out = layer(x, weight_noise="per_batch").numpy()
    assert np.allclose(out[:, :1], out)                    # one draw per member
    assert not np.allclose(out[0], out[1]) and not np.allclose(out[1], out[2])


def test_dense_member_noise_rows_are_independent():
  layer = DenseReparameterization(2, num_members=2)
  x = tf.ones([1000, 3])
  layer(x)
  _randomise(layer, 4)
  for p in layer.mean_field_parameters:  # identical members: outputs differ only by noise
    p.posterior_loc.assign(tf.broadcast_to(p.posterior_loc[:1], p.posterior_loc.shape))
    p.untransformed_posterior_scale.assign(
        tf.broadcast_to(p.untransformed_posterior_scale[:1], p.posterior_loc.shape))
  out = layer(x).numpy()
  assert abs(np.corrcoef(out[0, :, 0], out[1, :, 0])[0, 1]) < 0.1


def test_bad_inputs_give_clear_errors():
  with pytest.raises(ValueError, match="num_members=0"):
    DenseReparameterization(2, num_members=0)
  with pytest.raises(ValueError, match="units=0"):
    DenseReparameterization(0)
  with pytest.raises(ValueError, match="padding='FULL'"):
    Conv2DFlipout(2, 3, padding="FULL")
  layer = DenseReparameterization(2, num_members=3)
  layer(tf.zeros([4, 5]))
  with pytest.raises(ValueError, match="member axis has size 2"):
    layer(tf.zeros([2, 4, 5]))


def test_training_moves_every_variational_variable_and_lowers_the_kl():
  """VI as the binaries run it (`train_mean_field`: the compiled `TrainingLoop`) moves every
  loc, posterior scale and prior scale of dense and convolution layers, and lowers the KL.

  A gradient computed outside that loop could reach a variable the loop never trains. Mutation:
  the loop trains `list(variables)[:-1]` (one variable never moves), or its loop takes the
  KL from a tensor computed once at construction (the reported KL stays flat, the prior scales
  get no gradient).
  """
  rng = np.random.default_rng(5)
  x = rng.normal(size=[64, 5, 5, 2]).astype(np.float32)
  y = rng.normal(size=[64]).astype(np.float32)
  model = LayerChain([Conv2DFlipout(3, 3, activation="relu"), FlattenImage(),
                      DenseReparameterization(1)])
  model(x)
  parameters = mean_field_parameters(model)
  assert len(parameters) == 4   # kernel and bias of both layers
  for p in parameters:  # start far from the prior so the KL must fall
    p.posterior_loc.assign(p.posterior_loc * 5.0 + 1.0)
  variables = [v for p in parameters for v in (p.posterior_loc, p.untransformed_posterior_scale,
                                                p.untransformed_prior_scale)]
  before = [v.numpy() for v in variables]
  kl_before = float(model_kl(model))

  def log_likelihood(labels, outputs):
    return -0.5 * tf.square(labels - outputs[..., 0])

  result = train_mean_field(model, x, y, log_likelihood, num_steps=300, learning_rate=1e-2,
                            batch_size=64)
  for value, variable in zip(before, variables):
    assert not np.allclose(value, variable.numpy()), variable.name
  assert float(model_kl(model)) < 0.9 * kl_before
  assert result.kl_trace[0] == pytest.approx(kl_before, rel=0.05)
  assert result.kl_trace[-1] == pytest.approx(float(model_kl(model)), rel=0.05)


def test_gaussian_sample_draws_one_weight_per_row():
  layer = GaussianSample([2], num_members=3)
  samples = layer(tf.zeros([5000, 1])).numpy()
  assert samples.shape == (3, 5000, 2)
  scale = float(tf.nn.softplus(-7.0))
  assert samples.std(axis=1) == pytest.approx(np.full([3, 2], scale), rel=0.05)
