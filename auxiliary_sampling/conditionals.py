"""Closed-form Gaussian conditionals of the additive auxiliary variables (paper Appendix A).

All functions are element-wise, so they serve scalars, weight tensors and
tensors with a leading member axis alike. Notation: the current conditional
prior of the weight is p(w | a_1..k-1) = N(prior_loc, prior_variance) (the
paper's b_{k-1} + m_{k-1} and s_{k-1}^2); the next auxiliary variable has the
independent prior p(a_k) = N(aux_loc, aux_variance) (mu_k, sigma_k^2); the
current variational posterior is q_{k-1}(w) = N(posterior_loc,
posterior_variance) (nu_{k-1}, rho_{k-1}^2). Any prior mean is allowed.

`residual_variance` is s_k^2 = prior_variance - aux_variance, the variance p(w | a_1..k) keeps.
Callers that know it without cancellation pass it in: the difference multiplies its inputs'
round-off by prior / residual, 1,000 at ratio 0.999, which in float32 puts q_k(w)'s variance
4e-5 relative off.
"""
from __future__ import annotations

import math

import tensorflow as tf

_LOG_2PI = math.log(2.0 * math.pi)

Pair = tuple[tf.Tensor, tf.Tensor]


def _residual(prior_variance, aux_variance, residual_variance):
  """s_k^2: as given, else prior_variance - aux_variance."""
  return prior_variance - aux_variance if residual_variance is None else residual_variance


def auxiliary_given_weight(weight, prior_loc, prior_variance, aux_loc, aux_variance,
                           residual_variance=None) -> Pair:
  """p(a_k | a_1..k-1, w): the share of w - prior_loc that falls on a_k (Appendix A)."""
  ratio = aux_variance / prior_variance
  loc = aux_loc + (weight - prior_loc) * ratio
  residual_variance = _residual(prior_variance, aux_variance, residual_variance)
  variance = aux_variance * residual_variance / prior_variance
  return loc, variance


def auxiliary_marginal(posterior_loc, posterior_variance, prior_loc, prior_variance,
                       aux_loc, aux_variance, residual_variance=None) -> Pair:
  """q_{k-1}(a_k) = integral of p(a_k | a_1..k-1, w) q_{k-1}(w) dw (Appendix A)."""
  ratio = aux_variance / prior_variance
  loc = aux_loc + (posterior_loc - prior_loc) * ratio
  residual_variance = _residual(prior_variance, aux_variance, residual_variance)
  variance = aux_variance * residual_variance / prior_variance + posterior_variance * ratio**2
  return loc, variance


def posterior_given_auxiliary(aux_value, posterior_loc, posterior_variance, prior_loc,
                              prior_variance, aux_loc, aux_variance,
                              residual_variance=None) -> Pair:
  """q_{k-1}(w | a_k) proportional to p(a_k | a_1..k-1, w) q_{k-1}(w) (Appendix A).

  This is the initialisation of q_k(w) that makes ELBO_aux start exactly at
  the previous step's value (Section 3.2).
  """
  residual_variance = _residual(prior_variance, aux_variance, residual_variance)
  denominator = prior_variance * residual_variance + posterior_variance * aux_variance
  loc = (posterior_loc * prior_variance * residual_variance
         + posterior_variance * (aux_variance * prior_loc + (aux_value - aux_loc) * prior_variance)
         ) / denominator
  variance = posterior_variance * prior_variance * residual_variance / denominator
  return loc, variance


def prior_given_auxiliary(aux_value, prior_loc, prior_variance, aux_loc, aux_variance,
                          residual_variance=None) -> Pair:
  """p(w | a_1..k): the prior update after fixing a_k (Section 2.2)."""
  return prior_loc + aux_value - aux_loc, _residual(prior_variance, aux_variance, residual_variance)


def normal_log_prob(value, loc, variance):
  """Element-wise log N(value | loc, variance)."""
  variance = tf.convert_to_tensor(variance)
  return -0.5 * (_LOG_2PI + tf.math.log(variance) + tf.square(value - loc) / variance)


def normal_kl(loc_q, variance_q, loc_p, variance_p):
  """Element-wise KL(N(loc_q, variance_q) || N(loc_p, variance_p))."""
  return 0.5 * ((variance_q + tf.square(loc_q - loc_p)) / variance_p - 1.0
                + tf.math.log(variance_p) - tf.math.log(variance_q))
