"""Whole-data ELBO estimates: the closed form of a linear model's, and the same numbers in
whatever pieces the clock cuts the loop into (so that a long estimate can log its progress)."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling import elbo_estimate, progress
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.model_parameters import model_kl

NOISE = 0.7


def _gaussian_log_likelihood(labels, outputs):
  return (-0.5 * np.log(2 * np.pi * NOISE**2)
          - 0.5 * tf.square(labels[..., 0] - outputs[..., 0]) / NOISE**2)


@pytest.fixture(scope="module")
def linear():
  """A 3-member mean-field linear model (no bias), 21 examples: batches of 8 leave a short one."""
  tf.random.set_seed(0)
  rng = np.random.default_rng(0)
  x = rng.normal(size=[21, 2]).astype(np.float32)
  y = (x @ np.array([1.0, -0.5]) + NOISE * rng.normal(size=21)).astype(np.float32)[:, None]
  model = tf_keras.Sequential([DenseReparameterization(1, use_bias=False, num_members=3,
                                                       trainable_prior_scale=False)])
  model(x[:1])
  kernel = model.layers[0].kernel
  kernel.posterior_loc.assign(rng.normal(size=[3, 2, 1]).astype(np.float32))
  return dict(x=x, y=y, model=model)


def test_the_estimate_is_the_closed_form_expected_log_likelihood(linear):
  """E_q log N(y | x w, s^2) = log N(y | x mu, s^2) - sum_i x_i^2 sigma_i^2 / (2 s^2), per member:
  the Monte Carlo estimate over 2,000 draws lands within 4 of its standard errors.

  Catches: a batch skipped or counted twice (the short last batch), draws shared by the
  examples (no per-example noise), the sum divided by the wrong number of draws."""
  x, y, model = linear["x"].astype(np.float64), linear["y"][:, 0].astype(np.float64), linear[
      "model"]
  kernel = model.layers[0].kernel
  loc = kernel.posterior_loc.numpy()[..., 0].astype(np.float64)          # [3, 2]
  variance = kernel.posterior_variance.numpy()[..., 0].astype(np.float64)  # [3, 2]
  residual = y[None, :] - loc @ x.T
  exact = np.sum(-0.5 * np.log(2 * np.pi * NOISE**2) - 0.5 * residual**2 / NOISE**2
                 - 0.5 * (x**2 @ variance.T).T / NOISE**2, axis=1)
  terms = elbo_estimate.estimate_elbo_terms(model, linear["x"], linear["y"],
                                            _gaussian_log_likelihood, batch_size=8,
                                            num_samples=2000)
  # Var of each example's term under q: a^2 v + v^2 / 2 for a = residual / s^2, v = x^2 sigma^2
  # (per example, summed: the draws are independent across examples).
  spread = (x**2 @ variance.T).T
  variance_per_draw = np.sum((residual / NOISE**2)**2 * spread + 0.5 * (spread / NOISE**2)**2,
                             axis=1)
  standard_error = np.sqrt(variance_per_draw / 2000)
  assert np.all(np.abs(terms.expected_log_likelihood - exact) < 4 * standard_error), (
      terms.expected_log_likelihood, exact, standard_error)
  np.testing.assert_allclose(terms.kl, model_kl(model).numpy(), rtol=1e-6)


@pytest.mark.parametrize("seconds", [0.0, 1e9])
def test_pieces_add_up_to_one_loop_bit_for_bit(linear, monkeypatch, seconds):
  """Cut into pieces of one batch each (every piece is due a progress line) or into one batch
  then the rest, the estimate equals the one-loop sum bit for bit, with the same noise.

  Catches: a piece that restarts at the data's first batch (or at draw 0 of the noise stream),
  the running sum dropped between pieces, a piece's last batch counted twice."""
  model, x, y = linear["model"], linear["x"], linear["y"]
  counters = [variable for variable in model.variables if "counter" in variable.name]
  assert counters, "the model's noise stream has no counter to rewind"
  start = [counter.numpy() for counter in counters]
  whole = elbo_estimate._summed_log_likelihood(
      model, tf.constant(x), tf.constant(y), _gaussian_log_likelihood, 8,
      tf.constant(0, tf.int32), tf.constant(3 * 5, tf.int32),
      tf.zeros([3], tf.float64)).numpy() / 5
  for counter, value in zip(counters, start):
    counter.assign(value)
  monkeypatch.setattr(progress, "PROGRESS_SECONDS", seconds)
  lines = []
  monkeypatch.setattr(progress.logging, "info", lines.append)
  pieces = elbo_estimate.estimate_elbo_terms(model, x, y, _gaussian_log_likelihood,
                                             batch_size=8, num_samples=5,
                                             description="test estimate")
  np.testing.assert_array_equal(pieces.expected_log_likelihood, whole)
  if seconds == 0.0:   # a line after every piece but the last, and one at the end
    assert [line.split(",")[0] for line in lines] == [
        f"test estimate: step {step}/15 (" + f"{100 * step / 15:.0f}%)" for step in range(1, 16)]
  else:
    assert lines == []
