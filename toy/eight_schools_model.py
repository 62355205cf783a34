"""The eight schools model of the paper's Figure 3, and its references.

As Edward2 programs: the model (Rubin 1981; Gelman et al.), its decomposition into K additive
auxiliaries per unknown (paper Section 2.4) and the non-centred form NUTS samples (`tfp.mcmc`);
the exact posterior by quadrature over (mu, log tau) with theta integrated out (log p(y),
posterior means, independent draws). `toy.eight_schools` is the binary that refines against them.
"""
from __future__ import annotations

import math
from typing import Optional

import edward2 as ed
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from auxiliary_sampling.stable_auxiliaries import StableBlock

EFFECTS = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
STANDARD_ERRORS = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
NUM_SCHOOLS = 8
# The unknowns split into auxiliaries: mu (Normal, scale 5), s_tau (Cauchy, scale 5;
# tau = |s_tau|) and the standardised school effects eta (Normal, scale 1; theta = mu + tau * eta).
BLOCKS = (StableBlock("mu", "normal", 5.0), StableBlock("s_tau", "cauchy", 5.0),
          StableBlock("eta", "normal", 1.0, (NUM_SCHOOLS,)))


def eight_schools():
  """The model (Rubin 1981; Gelman et al.), with the observed effects as `y`."""
  zero, ones = tf.zeros([]), tf.ones([NUM_SCHOOLS])
  mu = ed.Normal(loc=zero, scale=5.0, name="mu")
  tau = ed.HalfCauchy(loc=zero, scale=5.0, name="tau")
  theta = ed.Normal(loc=mu * ones, scale=tau * ones, name="theta")
  return ed.Normal(loc=theta, scale=tf.constant(STANDARD_ERRORS, tf.float32), name="y")


def auxiliary_eight_schools(num_auxiliary: int, num_fixed: Optional[int] = None):
  """The model through K additive auxiliaries per unknown (paper Sec. 2.4), at refinement stage k.

  a_mu_k ~ N(0, 25/K), a_tau_k ~ Cauchy(0, 5/K), a_theta_k ~ N(0, 1/K) for the
  `num_fixed` = k auxiliaries already drawn; the other K - k of each sum to one
  residual with the same family's prior (r_mu ~ N(0, 25 (K-k)/K), r_tau ~
  Cauchy(0, 5 (K-k)/K), r_theta ~ N(0, (K-k)/K)). num_fixed = K - 1 is the
  paper's decomposition with a_K = r.
  """
  k_total = float(num_auxiliary)
  num_fixed = num_auxiliary - 1 if num_fixed is None else num_fixed
  remaining = (num_auxiliary - num_fixed) / k_total
  a_mu = ed.Normal(loc=tf.zeros([num_fixed]), scale=math.sqrt(25.0 / k_total), name="a_mu")
  r_mu = ed.Normal(loc=0.0, scale=5.0 * math.sqrt(remaining), name="r_mu")
  a_tau = ed.Cauchy(loc=tf.zeros([num_fixed]), scale=5.0 / k_total, name="a_tau")
  r_tau = ed.Cauchy(loc=0.0, scale=5.0 * remaining, name="r_tau")
  a_theta = ed.Normal(loc=tf.zeros([num_fixed, NUM_SCHOOLS]), scale=math.sqrt(1.0 / k_total),
                      name="a_theta")
  r_theta = ed.Normal(loc=tf.zeros([NUM_SCHOOLS]), scale=math.sqrt(remaining), name="r_theta")
  mu, tau, theta = to_parameters(tf.reduce_sum(a_mu) + r_mu, tf.reduce_sum(a_tau) + r_tau,
                                 tf.reduce_sum(a_theta, axis=0) + r_theta)
  return ed.Normal(loc=theta, scale=tf.constant(STANDARD_ERRORS, tf.float32), name="y")


def to_parameters(mu, s_tau, eta):
  """(mu, tau, theta) from the sums of the auxiliaries: tau = |s_tau|, theta = mu + tau * eta."""
  tau = tf.abs(s_tau)
  return mu, tau, mu[..., None] + tau[..., None] * eta


def auxiliary_log_joint_fn(num_auxiliary: int):
  """log p(y, a_1..k, r) from Edward2 for stage k, vectorised over a leading batch axis."""
  log_joint = ed.make_log_joint_fn(auxiliary_eight_schools)

  def log_joint_fn(num_fixed, fixed, residual):
    def one(args):
      a_mu, a_tau, a_theta, r_mu, r_tau, r_theta = args
      return log_joint(num_auxiliary, num_fixed, a_mu=a_mu, a_tau=a_tau, a_theta=a_theta, r_mu=r_mu,
                       r_tau=r_tau, r_theta=r_theta, y=EFFECTS.astype(np.float32))
    return tf.vectorized_map(one, (fixed["mu"], fixed["s_tau"], fixed["eta"], residual["mu"],
                                   residual["s_tau"], residual["eta"]))
  return log_joint_fn


def noncentered_eight_schools(dtype: tf.DType = tf.float64):
  """The same model with theta = mu + tau * eta, eta_i ~ N(0, 1): the form NUTS samples well.

  The centred program's density needs (theta - mu) / tau, which loses eta to
  rounding once tau is tiny (below ~1e-4 in float32, ~1e-17 in float64): there
  eta's prior vanishes and a chain that wanders down can stay stuck. Here eta is
  itself the random variable, so nothing cancels.
  """
  zero = tf.zeros([], dtype)
  mu = ed.Normal(loc=zero, scale=5.0, name="mu")
  tau = ed.HalfCauchy(loc=zero, scale=5.0, name="tau")
  eta = ed.Normal(loc=tf.zeros([NUM_SCHOOLS], dtype), scale=1.0, name="eta")
  return ed.Normal(loc=mu + tau * eta, scale=tf.constant(STANDARD_ERRORS, dtype), name="y")


def nuts_target_log_prob_fn():
  """log p(mu, tau, eta, y) from Edward2 on (mu, u = log tau, eta).

  Edward2 runs the non-centred program, in float64.
  """
  log_joint = ed.make_log_joint_fn(noncentered_eight_schools)

  def one(args):
    mu, log_tau, eta = args
    return log_joint(mu=mu, tau=tf.exp(log_tau), eta=eta, y=EFFECTS) + log_tau   # d tau = tau d u

  def target(mu, log_tau, eta):
    return tf.vectorized_map(one, (mu, log_tau, eta))
  return target


def run_nuts(num_chains: int, num_burnin: int, num_draws: int, seed: int,
             jit_compile: bool = False) -> dict[str, np.ndarray]:
  """NUTS draws of (mu, tau, theta), [num_chains * num_draws] each, with the sampler's diagnostics.

  `jit_compile` compiles the chains with XLA: about 2.5 times as fast on a CPU (the tree's many
  small operations), other draws by round-off; the binary's committed reference ran uncompiled.

  Chains start dispersed (mu ~ N(0, 5^2), log tau ~ N(1, 1), eta ~ N(0, 1)) so
  that the potential scale reduction (r-hat) can reveal a chain that has not mixed.
  Every chain adapts its own step size: at large tau the eta posterior is narrow
  (sigma_i / tau), and a step size tuned on the typical set is unstable there, so
  with one shared step size a chain started at tau ~ 40 never moved.
  """
  step_size = [
      tf.fill([num_chains], tf.constant(0.3, tf.float64)),
      tf.fill([num_chains], tf.constant(0.3, tf.float64)),
      tf.fill([num_chains, 1], tf.constant(0.3, tf.float64))
  ]
  kernel = tfp.mcmc.NoUTurnSampler(nuts_target_log_prob_fn(), step_size=step_size)
  kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel,
                                                    num_adaptation_steps=int(0.8 * num_burnin),
                                                    target_accept_prob=tf.constant(0.9, tf.float64))
  starts = tf.random.stateless_normal([num_chains, NUM_SCHOOLS + 2], seed=[seed, 3],
                                      dtype=tf.float64)
  initial = [5.0 * starts[:, 0], 1.0 + starts[:, 1], starts[:, 2:]]

  @tf.function(jit_compile=jit_compile)
  def sample():
    return tfp.mcmc.sample_chain(
        num_results=num_draws, num_burnin_steps=num_burnin, current_state=initial, kernel=kernel,
        trace_fn=lambda _, results: results.inner_results.has_divergence, seed=[seed, 17])
  (mu, log_tau, eta), divergent = sample()
  r_hat = [
      float(np.max(tfp.mcmc.potential_scale_reduction(part).numpy())) for part in (mu, log_tau, eta)
  ]
  tau = tf.exp(log_tau)
  theta = mu[..., None] + tau[..., None] * eta
  flat = lambda x: np.reshape(x.numpy(),
                              (num_chains * num_draws,) + tuple(x.shape[2:]))  # noqa: E731
  return {
      "mu": flat(mu),
      "tau": flat(tau),
      "theta": flat(theta),
      "divergences": np.array(int(np.sum(divergent.numpy()))),
      "max_r_hat": np.array(max(r_hat))
  }


def _posterior_grid(grid_size: int):
  """log p(y, mu, log tau) on a grid over (mu, log tau), theta integrated out analytically.

  p(mu, tau | y) ∝ N(mu; 0, 25) HalfCauchy(tau; 5) prod_i N(y_i; mu, sigma_i^2 + tau^2); the
  density in log tau carries the Jacobian tau.
  """
  mu = np.linspace(-40.0, 50.0, grid_size)[:, None]
  log_tau = np.linspace(-12.0, 7.0, grid_size)[None, :]
  tau = np.exp(log_tau)
  variance = STANDARD_ERRORS[:, None, None].astype(np.float64) ** 2 + tau[None] ** 2
  log_likelihood = np.sum(-0.5 * np.log(2 * np.pi * variance)
                          - 0.5 * (EFFECTS[:, None, None] - mu[None]) ** 2 / variance, axis=0)
  log_prior = (-0.5 * mu ** 2 / 25.0 - np.log(5.0 * math.sqrt(2 * math.pi))
               + np.log(2.0 / (np.pi * 5.0 * (1.0 + (tau / 5.0) ** 2))) + log_tau)
  return mu[:, 0], log_tau[0], log_likelihood + log_prior


def log_evidence_by_quadrature(grid_size: int = 1201) -> float:
  """log p(y): the ceiling of every ELBO, so log p(y) - ELBO_aux is an exact KL.

  See train_and_evaluate.
  """
  mu, log_tau, log_joint = _posterior_grid(grid_size)
  shift = log_joint.max()
  return float(
      shift +
      np.log(np.sum(np.exp(log_joint - shift)) * (mu[1] - mu[0]) * (log_tau[1] - log_tau[0])))


def posterior_means_by_quadrature(grid_size: int = 1201) -> dict[str, float]:
  """E[mu | y] and E[tau | y] by quadrature over (mu, log tau)."""
  mu, log_tau, log_posterior = _posterior_grid(grid_size)
  weights = np.exp(log_posterior - log_posterior.max())
  weights /= weights.sum()
  return {
      "mu_mean": float(np.sum(weights * mu[:, None])),
      "tau_mean": float(np.sum(weights * np.exp(log_tau)[None]))
  }


def posterior_draws_by_quadrature(num_draws: int, seed: int,
                                  grid_size: int = 801) -> dict[str, np.ndarray]:
  """Independent exact posterior draws: (mu, log tau) from the quadrature grid, uniform within a
  cell, then theta_i | mu, tau, y ~ N((y_i / sigma_i^2 + mu / tau^2) / precision_i,
  1 / precision_i).

  A reference that needs no MCMC (the tests use it; the binary checks NUTS against it)."""
  rng = np.random.default_rng(seed)
  mu_nodes, log_tau_nodes, log_posterior = _posterior_grid(grid_size)
  weights = np.exp(log_posterior - log_posterior.max()).ravel()
  cells = rng.choice(weights.size, size=num_draws, p=weights / weights.sum())
  mu_index, tau_index = np.unravel_index(cells, log_posterior.shape)
  mu = mu_nodes[mu_index] + (rng.uniform(size=num_draws) - 0.5) * (mu_nodes[1] - mu_nodes[0])
  log_tau = log_tau_nodes[tau_index] + (rng.uniform(size=num_draws) - 0.5) * (log_tau_nodes[1] -
                                                                              log_tau_nodes[0])
  tau = np.exp(log_tau)
  precision = 1.0 / STANDARD_ERRORS[None, :] ** 2 + 1.0 / tau[:, None] ** 2
  mean = (EFFECTS[None, :] / STANDARD_ERRORS[None, :]**2 +
          mu[:, None] / tau[:, None]**2) / precision
  theta = mean + rng.standard_normal(mean.shape) / np.sqrt(precision)
  return {"mu": mu, "tau": tau, "theta": theta}


def as_features(mu, tau, theta) -> np.ndarray:
  """(mu, log tau, theta_1..8): the space in which the KL is estimated.

  KL is invariant to the log.
  """
  return np.column_stack([mu, np.log(tau), theta])
