"""methods.trainers.particles: the SVGD direction, its fixed point, f-SVGD's function-space prior,
and
particle training (fit, spread away from the data, resume)."""
import math

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from methods import network_kinds
from methods.trainers.deep_ensemble import MemberDense
from methods.trainers.gaussian_head import HomoscedasticNoise
from methods.trainers.particles import (FunctionSpaceSettings, ParticleNetwork, gaussian_from_draws,
                                 gaussian_log_density, log_noise_prior, log_weight_prior,
                                 median_bandwidth, prior_function_draws, regression_particles,
                                 svgd_direction, train_particles)


def _reference_direction(x, scores):
  """Liu & Wang's Eq. 8 one particle at a time, the bandwidth by their median heuristic."""
  n = len(x)
  squared = np.array([[np.sum((a - b) ** 2) for b in x] for a in x])
  bandwidth = np.median(squared) / (2 * np.log(n + 1))
  phi = np.zeros_like(x)
  for i in range(n):
    for j in range(n):
      k = np.exp(-squared[i, j] / (2 * bandwidth))
      phi[i] += k * scores[j] + k * (x[i] - x[j]) / bandwidth   # grad_{x_j} k(x_j, x_i)
  return phi / n


def test_svgd_direction_is_eq_8_particle_by_particle():
  """Catches a repulsion of the wrong sign or scale, a bandwidth without the diagonal's zeros
  or the log(n + 1), and a kernel applied to the scores transposed."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(7, 3)) * np.array([1.0, 3.0, 0.2])
  scores = rng.normal(size=(7, 3))
  direction = svgd_direction(tf.constant(x), tf.constant(scores)).numpy()
  np.testing.assert_allclose(direction, _reference_direction(x, scores), rtol=1e-10)


def test_svgd_direction_of_several_sets_is_each_sets_own():
  """Catches a kernel or bandwidth shared across the sets of a leading axis (a bandit's seeds)."""
  rng = np.random.default_rng(1)
  x, scores = rng.normal(size=(3, 5, 2)) * [[[1.0]], [[10.0]], [[0.1]]], rng.normal(size=(3, 5, 2))
  together = svgd_direction(tf.constant(x), tf.constant(scores)).numpy()
  for index in range(3):
    np.testing.assert_allclose(together[index], _reference_direction(x[index], scores[index]),
                               rtol=1e-10)


def test_bandwidth_is_floored_when_the_particles_coincide():
  squared = tf.zeros([4, 4], tf.float64)
  assert median_bandwidth(squared).numpy() == pytest.approx(1e-5)
  direction = svgd_direction(tf.ones([4, 2], tf.float64), tf.ones([4, 2], tf.float64)).numpy()
  np.testing.assert_allclose(direction, np.ones([4, 2]))


@tf.function
def _svgd_on_a_gaussian(particles, mean, scale, steps, repulsion):
  for _ in tf.range(steps):
    scores = -(particles - mean) / scale**2
    if repulsion:
      direction = svgd_direction(particles, scores)
    else:
      direction = scores
    particles += 0.05 * direction
  return particles


def test_svgd_particles_settle_on_the_target_and_without_repulsion_collapse():
  """SVGD's fixed point on N(2, 0.5^2) from N(0, 1): the particles' mean and spread match the
  target; gradient ascent alone (the repulsion dropped) collapses them on the mode. Catches a
  repulsion of the wrong sign (the particles collapse too) or an attraction not averaged."""
  start = tf.constant(np.random.default_rng(1).normal(size=(100, 1)))
  particles = _svgd_on_a_gaussian(start, 2.0, 0.5, 3000, True).numpy()
  assert np.mean(particles) == pytest.approx(2.0, abs=0.02)
  assert np.std(particles) == pytest.approx(0.5, rel=0.1)
  collapsed = _svgd_on_a_gaussian(start, 2.0, 0.5, 3000, False).numpy()
  assert np.std(collapsed) < 1e-3


def test_log_priors_are_the_authors_densities():
  """N(0, 1/fan_out) on every kernel and bias; InverseGamma(1, 0.1) on the noise std."""
  layer = MemberDense(3, 2, seed=0)
  layer(tf.zeros([1, 4]))
  layer.bias.assign(tf.random.stateless_normal([2, 3], [0, 1]))
  expected = [sum(scipy.stats.norm.logpdf(w[member], scale=1 / math.sqrt(3)).sum()
                  for w in (layer.kernel.numpy(), layer.bias.numpy())) for member in range(2)]
  np.testing.assert_allclose(log_weight_prior([layer]).numpy(), expected, rtol=1e-5)
  scales = np.array([0.05, 0.3, 2.0], np.float32)
  np.testing.assert_allclose(log_noise_prior(tf.constant(scales)).numpy(),
                             scipy.stats.invgamma.logpdf(scales, a=1.0, scale=0.1), rtol=1e-5)


def test_prior_draws_of_a_linear_network_have_its_exact_covariance():
  """One linear unit, w, b ~ N(0, 1): f(x) has covariance x . x' + 1; the moment-matched
  Gaussian's precision inverts it. Catches draws scaled by fan_in or a shared bias."""
  layer = MemberDense(1, 1, seed=0)
  layer(tf.zeros([1, 2]))
  network = ParticleNetwork([layer], HomoscedasticNoise(num_members=1))
  points = tf.constant([[1.0, 0.0], [0.5, 2.0], [-1.0, 1.0]])
  draws_count = 200_000
  normals = [tf.random.stateless_normal([1, draws_count, 2, 1], [1, 2]),
             tf.random.stateless_normal([1, draws_count, 1], [3, 4])]
  draws = prior_function_draws(network, points[tf.newaxis], normals)[0]
  exact = points.numpy() @ points.numpy().T + 1.0
  np.testing.assert_allclose(np.cov(draws.numpy().T), exact, atol=0.05)
  mean, precision = gaussian_from_draws(draws)
  np.testing.assert_allclose(mean.numpy(), 0.0, atol=0.02)
  np.testing.assert_allclose(precision.numpy() @ exact, np.eye(3), atol=0.03)
  values = tf.constant([[0.3, -1.0, 2.0], [0.0, 0.0, 0.0]])
  expected = [scipy.stats.multivariate_normal.logpdf(v, mean.numpy(), exact) for v in values]
  constant = scipy.stats.multivariate_normal.logpdf(mean.numpy(), mean.numpy(), exact)
  np.testing.assert_allclose(gaussian_log_density(values, mean, precision).numpy(),
                             np.array(expected) - constant, rtol=0.03, atol=0.02)


def test_prior_eigenvalues_are_floored():
  """Fewer draws than points: the covariance is singular, the precision stays finite."""
  draws = tf.constant(np.random.default_rng(0).normal(size=(3, 6)))
  _, precision = gaussian_from_draws(draws)
  assert np.all(np.isfinite(precision.numpy()))
  assert np.max(np.linalg.eigvalsh(precision.numpy())) == pytest.approx(1e3)


def test_function_space_settings_refuse_an_extra_batch_too_small_for_its_prior_points():
  with pytest.raises(ValueError, match="extra_batch=1 is not allowed; allowed: >= 2"):
    FunctionSpaceSettings(prior_points=4, extra_batch=1)


def _one_dimensional_data(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.uniform(-1, 1, size=(200, 1)).astype(np.float32)
  y = (np.sin(3 * x) + 0.1 * rng.normal(size=x.shape)).astype(np.float32)
  return x, y


def _fit(function_space, num_steps=1500, seed=0, checkpoint_dir=None, steps_per_checkpoint=500):
  tf.keras.utils.set_random_seed(seed)
  model = regression_particles(10, 32, num_hidden_layers=2, initial_noise_scale=0.5, seed=seed)
  x, y = _one_dimensional_data()
  result = train_particles(model, x, y, num_steps=num_steps, learning_rate=1e-2, batch_size=50,
                           seed=seed, function_space=function_space,
                           checkpoint_dir=checkpoint_dir, steps_per_checkpoint=steps_per_checkpoint)
  return model, result


@pytest.mark.parametrize("function_space", [None, FunctionSpaceSettings(extra_batch=20)],
                         ids=["svgd", "fsvgd"])
def test_particles_fit_the_data_and_spread_away_from_it(function_space):
  """Both posteriors fit sin(3x) on [-1, 1] (their mean within the noise, the noise scale
  learned) and disagree more at x = 3 than inside the data. Catches an update that ascends the
  wrong way, a noise scale left at its start, or f-SVGD's error signal not reaching the weights."""
  model, result = _fit(function_space)
  grid = np.linspace(-0.9, 0.9, 50, dtype=np.float32)[:, None]
  outputs = model(grid).numpy()
  assert np.sqrt(np.mean((outputs[..., 0].mean(0) - np.sin(3 * grid[:, 0])) ** 2)) < 0.1
  noise = outputs[:, 0, 1]
  assert np.all((noise > 0.05) & (noise < 0.3)), noise
  inside = model(np.zeros([1, 1], np.float32)).numpy()[:, 0, 0].std()
  outside = model(np.full([1, 1], 3.0, np.float32)).numpy()[:, 0, 0].std()
  assert outside > 5 * inside, (inside, outside)
  assert np.mean(result.trace[-100:]) > np.mean(result.trace[:100])


def test_a_fixed_weight_prior_scale_reaches_the_svgd_objective():
  """`weight_prior_scale` replaces N(0, 1/fan_out) in the objective: a tight N(0, 0.01^2) prior
  pulls the weights far below the default's, and a loose one lets them grow past it. Catches the
  setting not reaching the training loop (all three runs would then be the same)."""
  norms = {}
  for name, scale in (("default", None), ("tight", 0.01), ("loose", 30.0)):
    tf.keras.utils.set_random_seed(0)
    model = regression_particles(4, 16, initial_noise_scale=0.5, seed=0)
    x, y = _one_dimensional_data()
    train_particles(model, x, y, num_steps=300, learning_rate=1e-2, batch_size=50, seed=0,
                    weight_prior_scale=scale)
    norms[name] = float(np.mean([np.abs(v.numpy()).mean() for v in model.trainable_variables
                                 if "kernel" in v.name]))
  assert norms["tight"] < 0.3 * norms["default"], norms
  assert norms["loose"] > norms["default"], norms


def test_an_interrupted_fsvgd_run_resumes_to_the_same_particles(tmp_path):
  """f-SVGD draws prior networks and input perturbations from its own stream: a resume that
  did not checkpoint it (planted: extra_state dropped) would draw other ones and part ways."""
  settings = FunctionSpaceSettings(extra_batch=20)
  uninterrupted, _ = _fit(settings, num_steps=60, steps_per_checkpoint=20)
  _fit(settings, num_steps=40, checkpoint_dir=str(tmp_path), steps_per_checkpoint=20)
  resumed, result = _fit(settings, num_steps=60, checkpoint_dir=str(tmp_path),
                         steps_per_checkpoint=20)
  assert result.resumed_from_step == 40
  for a, b in zip(uninterrupted.variables, resumed.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.name)


def _initial_kernels(config):
  from uci.networks import uci_networks
  model = uci_networks(config).builder(network_kinds.PARTICLES)(config.num_particles)
  model(tf.zeros([5, 13]))
  return [layer for layer in model.layers if isinstance(layer, MemberDense)]


def test_fpovi_initializer_draws_the_authors_normal_and_the_default_keeps_he_and_glorot():
  """--particle_initializer reaches the UCI particles: fpovi draws every kernel from the f-POVI
  authors' untruncated N(0, 1/(fan_in + fan_out + 1)) (thu-ml/fpovi `init_bnn_weight`), the
  default keeps He-normal hidden kernels (std sqrt(2/fan_in), truncated at 2 std) and a
  Glorot-uniform output. Catches the flag not reaching the network (the default's weights under
  fpovi), a variance of 2/(fan_in + fan_out) (Glorot's), truncation, and
  particles drawn alike."""
  from uci.config import UciConfig
  fpovi = _initial_kernels(UciConfig(method="svgd", particle_initializer="fpovi", seed=3))
  default = _initial_kernels(UciConfig(method="svgd", seed=3))
  for layer in fpovi:
    kernel = layer.kernel.numpy()
    fan_in, fan_out = kernel.shape[1:]
    expected = 1 / math.sqrt(fan_in + fan_out + 1)
    # The sample std of n normals is within 3 of its standard errors (std / sqrt(2n)).
    assert abs(kernel.std() - expected) < 3 * expected / math.sqrt(2 * kernel.size)
    assert np.abs(kernel).max() > 2.5 * expected   # not truncated at 2 std
    assert not np.allclose(kernel[0], kernel[1])
    np.testing.assert_array_equal(layer.bias.numpy(), 0.0)
  hidden, output = default
  fan_in = hidden.kernel.shape[1]
  assert abs(hidden.kernel.numpy().std() - math.sqrt(2 / fan_in)) < 0.05 * math.sqrt(2 / fan_in)
  assert np.abs(hidden.kernel.numpy()).max() <= 2 * math.sqrt(2 / fan_in) / 0.87962566 + 1e-6
  limit = math.sqrt(6 / (output.kernel.shape[1] + output.kernel.shape[2]))
  assert np.abs(output.kernel.numpy()).max() <= limit
  assert np.abs(output.kernel.numpy()).max() > 0.9 * limit
  again = _initial_kernels(UciConfig(method="svgd", particle_initializer="fpovi", seed=3))
  np.testing.assert_array_equal(again[0].kernel.numpy(), fpovi[0].kernel.numpy())


def test_unknown_particle_initializer_is_refused():
  with pytest.raises(ValueError, match="initializer='glorot'; allowed: he_glorot, fpovi"):
    regression_particles(4, 8, initializer="glorot")
