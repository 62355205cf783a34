"""The tilted Gaussian q(r) ∝ N(r; loc, scale²) h(r).

Density, sampling and gradients against direct quadrature.
"""
import math

import numpy as np
import tensorflow as tf
from scipy import integrate, stats

from auxiliary_sampling.tilted import TiltedGaussian

LOC = np.array([0.5, -2.0, 3.0])
SCALE = np.array([0.3, 2.0, 1.0])
FIXED_SUM = np.array([1.0, -4.0, 0.2])
REST, PRIOR = 0.4, 5.0


def _cauchy_log_prob(x, scale):
  return -math.log(math.pi) - math.log(scale) - tf.math.log1p(tf.square(x / scale))


def _log_tilt(r):
  """The tilt of a Cauchy block of non-Gaussian refinement: p_rest(r) / p_prior(r + A)."""
  return _cauchy_log_prob(r, REST) - _cauchy_log_prob(r + FIXED_SUM[:, None], PRIOR)


def _direct(i, loc=None, scale=None):
  """Unnormalised density of element i, as scipy sees it."""
  loc = LOC[i] if loc is None else loc
  scale = SCALE[i] if scale is None else scale
  return lambda r: (stats.norm(loc, scale).pdf(r) * stats.cauchy(0, REST).pdf(r)
                    / stats.cauchy(-FIXED_SUM[i], PRIOR).pdf(r))


_NODES = np.linspace(-80.0, 80.0,
                     400_001)  # spacing 4e-4: a hundredth of the narrowest feature's width


def _quad(fn):
  """∫ fn over the real line on a dense uniform grid (independent of the tilted grid's nodes)."""
  return integrate.trapezoid(fn(_NODES), _NODES)


def _stratified_uniforms(n, count):
  return np.tile((np.arange(count) + 0.5) / count, (n, 1))


def test_without_tilt_it_is_the_gaussian():
  q = TiltedGaussian(LOC, SCALE, lambda r: tf.zeros_like(r))
  np.testing.assert_allclose(q.log_normalizer.numpy(), 0.0, atol=1e-6)
  r = np.array([[0.1, 0.9], [-5.0, 1.0], [2.5, 4.0]])
  np.testing.assert_allclose(
      q.log_prob(r).numpy(),
      stats.norm(LOC[:, None], SCALE[:, None]).logpdf(r), atol=1e-6)
  z = np.array([-2.0, -0.3, 0.0, 1.1])
  draws = q.sample(np.tile(stats.norm.cdf(z), (3, 1))).numpy()
  np.testing.assert_allclose(draws, LOC[:, None] + SCALE[:, None] * z[None, :],
                             atol=2e-3 * SCALE.max())


def test_normalizer_and_draws_match_direct_quadrature():
  q = TiltedGaussian(LOC, SCALE, _log_tilt, anchors=[(0.0, REST)])
  draws = q.sample(np.random.default_rng(0).uniform(size=(3, 4000))).numpy()
  for i in range(3):
    normalizer = _quad(_direct(i))
    # 256 nodes per grid part: ~2e-4 nats, under a tenth of the smallest ELBO standard error
    # reported.
    assert abs(q.log_normalizer.numpy()[i] - math.log(normalizer)) < 5e-4
    cdf = integrate.cumulative_trapezoid(_direct(i)(_NODES), _NODES, initial=0.0) / normalizer
    assert stats.kstest(draws[i], lambda x: np.interp(x, _NODES, cdf)).pvalue > 0.01
    # The density itself: log q at a few points against scipy.
    points = np.array([-1.0, 0.05, 2.0])
    expected = np.log(_direct(i)(points) / normalizer)
    np.testing.assert_allclose(q.log_prob(np.tile(points, (3, 1))).numpy()[i], expected, atol=5e-4)


def test_implicit_reparameterisation_gradients_match_finite_differences():
  """d/dθ E_q[r²] through the draws equals the derivative of the quadrature moment."""
  loc, scale = tf.Variable(LOC), tf.Variable(SCALE)
  uniforms = _stratified_uniforms(3, 20000)
  with tf.GradientTape() as tape:
    q = TiltedGaussian(loc, scale, _log_tilt, anchors=[(0.0, REST)])
    second_moment = tf.reduce_mean(tf.square(q.sample(uniforms)), axis=1)
    total = tf.reduce_sum(
        second_moment)  # elements are independent: its gradient is the Jacobian's diagonal
  d_loc, d_scale = (g.numpy() for g in tape.gradient(total, [loc, scale]))

  def moment(i, loc_i, scale_i):
    density = _direct(i, loc_i, scale_i)
    return _quad(lambda r: r * r * density(r)) / _quad(density)
  step = 1e-4
  for i in range(3):
    assert abs(second_moment.numpy()[i] -
               moment(i, LOC[i], SCALE[i])) < 2e-3 * (1 + moment(i, LOC[i], SCALE[i]))
    expected_loc = (moment(i, LOC[i] + step, SCALE[i]) -
                    moment(i, LOC[i] - step, SCALE[i])) / (2 * step)
    expected_scale = (moment(i, LOC[i], SCALE[i] + step) -
                      moment(i, LOC[i], SCALE[i] - step)) / (2 * step)
    assert abs(d_loc[i] - expected_loc) < 0.01 * (1 + abs(expected_loc))
    assert abs(d_scale[i] - expected_scale) < 0.01 * (1 + abs(expected_scale))


def test_log_expectation_matches_direct_quadrature():
  q = TiltedGaussian(LOC, SCALE, _log_tilt, anchors=[(0.0, REST)])
  centre = np.array([0.7, -1.0, 2.0])
  narrow = 0.05   # an integrand much narrower than the Gaussian factor, resolved by its anchor
  log_integrand = lambda r: _cauchy_log_prob(r - centre[:, None], narrow)   # noqa: E731
  values = q.log_expectation(log_integrand, anchors=[(centre, narrow)]).numpy()
  for i in range(3):
    density = _direct(i)
    expected = _quad(lambda r: density(r) * stats.cauchy(centre[i], narrow).pdf(r)) / _quad(density)
    assert abs(values[i] - math.log(expected)) < 1e-3
