"""Gaussian mean-field parameters with their (conditional) priors.

A `GaussianMeanField` is the unit that VI trains and refinement operates on:
the posterior q(w) = N(posterior_loc, posterior_scale^2) with a softplus
scale, and the prior p(w) = N(conditional_prior_loc, sigma_w^2 *
remaining_prior_fraction). Before refinement the prior is N(0, sigma_w^2)
with sigma_w trainable by empirical Bayes (one per weight tensor and member);
each refinement step k turns it into p(w | a_1..k). An optional leading member
axis holds M independent copies.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling import conditionals
from auxiliary_sampling.noise import AddWeight, _default_add_weight
from common.validation import check_integer

# The authors' code initialises the untransformed posterior scale at -7.
INITIAL_UNTRANSFORMED_POSTERIOR_SCALE = -7.0


def inverse_softplus(value: float) -> float:
  """The untransformed parameter u with softplus(u) = value (value > 0)."""
  return float(np.log(np.expm1(value)))


def softplus_inverse(value) -> tf.Tensor:
  """u with softplus(u) = value (value > 0), in the value's dtype, stable at both ends.

  log(expm1(v)) overflows for large v, so it is computed as v + log(-expm1(-v)); below
  exp(log(eps) + 2) that is log(v) to the dtype's precision, and above -(log(eps) + 2) it is v.
  These are the branches and thresholds of `tfp.math.softplus_inverse`, which this equals bit
  for bit (tested), so importing TensorFlow Probability (~0.5 s per process) is not needed.
  """
  value = tf.convert_to_tensor(value)
  threshold = np.log(np.finfo(value.dtype.as_numpy_dtype).eps) + 2.0
  too_small, too_large = value < np.exp(threshold), value > -threshold
  # The unused branch is computed at 1, so that neither it nor its gradient is inf or nan.
  safe = tf.where(too_small | too_large, tf.ones([], value.dtype), value)
  middle = safe + tf.math.log(-tf.math.expm1(-safe))
  return tf.where(too_small, tf.math.log(value), tf.where(too_large, value, middle))


def _constant_initializer(value: float):
  return lambda shape, dtype=None, **_: tf.fill(shape, tf.cast(value, dtype or tf.float32))


class GaussianMeanField(tf.Module):
  """A weight tensor's mean-field posterior and its prior (paper Section 2.2)."""

  def __init__(self, shape: Sequence[int], num_members: Optional[int] = None,
               prior_scale: float = 1.0, trainable_prior_scale: bool = True,
               loc_initializer: Optional[Callable] = None,
               untransformed_scale_init: float = INITIAL_UNTRANSFORMED_POSTERIOR_SCALE,
               add_weight: Optional[AddWeight] = None, dtype=tf.float32, name: str = "weight"):
    super().__init__(name=name)
    if num_members is not None:
      num_members = check_integer("num_members", num_members)
    if not prior_scale > 0:
      raise ValueError(f"prior_scale={prior_scale!r} must be > 0")
    add_weight = add_weight or _default_add_weight
    self.event_shape = tuple(int(d) for d in shape)
    self.num_members = num_members
    member_shape = [] if num_members is None else [num_members]
    full_shape = member_shape + list(self.event_shape)
    # One prior scale per tensor (and member): broadcastable against the weights.
    prior_shape = member_shape + [1] * len(self.event_shape)
    loc_initializer = loc_initializer or tf_keras.initializers.Zeros()
    self.posterior_loc = add_weight(
        name=f"{name}_posterior_loc", shape=full_shape, dtype=dtype,
        initializer=loc_initializer, trainable=True)
    self.untransformed_posterior_scale = add_weight(
        name=f"{name}_untransformed_posterior_scale", shape=full_shape, dtype=dtype,
        initializer=_constant_initializer(untransformed_scale_init), trainable=True)
    self.untransformed_prior_scale = add_weight(
        name=f"{name}_untransformed_prior_scale", shape=prior_shape, dtype=dtype,
        initializer=_constant_initializer(float(softplus_inverse(
            np.float64(prior_scale)))), trainable=trainable_prior_scale)
    self.conditional_prior_loc = add_weight(
        name=f"{name}_conditional_prior_loc", shape=full_shape, dtype=dtype,
        initializer=_constant_initializer(0.0), trainable=False)
    self.remaining_prior_fraction = add_weight(
        name=f"{name}_remaining_prior_fraction", shape=prior_shape, dtype=dtype,
        initializer=_constant_initializer(1.0), trainable=False)

  # Every derived quantity is recomputed from the variables on each access, so
  # gradients reach the untransformed scales (no distribution frozen at build).
  @property
  def posterior_scale(self) -> tf.Tensor:
    return tf.nn.softplus(self.untransformed_posterior_scale)

  @property
  def posterior_variance(self) -> tf.Tensor:
    return tf.square(self.posterior_scale)

  @property
  def prior_scale(self) -> tf.Tensor:
    """sigma_w, the scale of the unconditioned prior N(0, sigma_w^2)."""
    return tf.nn.softplus(self.untransformed_prior_scale)

  @property
  def prior_variance(self) -> tf.Tensor:
    """Variance of the current (conditional) prior p(w | a_1..k)."""
    return tf.square(self.prior_scale) * self.remaining_prior_fraction

  @property
  def posterior_variables(self) -> list[tf.Variable]:
    """The variables refinement optimises (the prior scale stays frozen)."""
    return [self.posterior_loc, self.untransformed_posterior_scale]

  @property
  def state_variables(self) -> list[tf.Variable]:
    """Everything that defines q and p, in a fixed order (for copying)."""
    return [self.posterior_loc, self.untransformed_posterior_scale, self.untransformed_prior_scale,
            self.conditional_prior_loc, self.remaining_prior_fraction]

  def _reduce_event(self, values: tf.Tensor) -> tf.Tensor:
    """Sums over the weight axes, keeping the member axis if there is one."""
    axes = list(range(0 if self.num_members is None else 1, len(values.shape)))
    return tf.reduce_sum(values, axis=axes)

  def kl_divergence(self) -> tf.Tensor:
    """KL(q(w) || p(w | a_1..k)), one value per member."""
    prior_variance = tf.broadcast_to(self.prior_variance, self.posterior_loc.shape)
    return self._reduce_event(conditionals.normal_kl(
        self.posterior_loc, self.posterior_variance, self.conditional_prior_loc, prior_variance))

  def sample(self, noise: tf.Tensor) -> tf.Tensor:
    """A reparameterised sample loc + scale * noise."""
    return self.posterior_loc + self.posterior_scale * noise

  def condition_on_auxiliary(self, variance_fraction, remaining_fraction,
                             noise: tf.Tensor) -> tf.Tensor:
    """One refinement step's sampling half (paper Algorithm 1, Appendix A).

    Draws a_k ~ q_{k-1}(a_k) with prior variance `variance_fraction` * sigma_w^2, sets q_k(w)
    to q_{k-1}(w | a_k) and the prior to p(w | a_1..k), of variance `remaining_fraction` *
    sigma_w^2, and returns log q_{k-1}(a_k) - log p(a_k), summed per member: the term
    ELBO_aux subtracts for a_k. The caller passes the remaining fraction
    (AuxiliarySchedule.remaining_fraction, exact in float64) because subtracting here, in
    float32, loses 2e-3 of it at ratio 0.9 and all of it at 0.99 (K = 5); both fractions are
    cast to this parameter's dtype, which AuxiliarySchedule.check_dtype vets.
    """
    # Python floats become float64 tensors first (tf.cast alone would round them to float32).
    dtype = self.remaining_prior_fraction.dtype
    variance_fraction, remaining_fraction = (
        tf.cast(tf.convert_to_tensor(value, dtype_hint=tf.float64), dtype)
        for value in (variance_fraction, remaining_fraction))
    sigma_w_squared = tf.square(self.prior_scale)
    aux_variance = tf.broadcast_to(sigma_w_squared * variance_fraction, self.posterior_loc.shape)
    prior_variance = tf.broadcast_to(self.prior_variance, self.posterior_loc.shape)
    residual_variance = tf.broadcast_to(sigma_w_squared * remaining_fraction,
                                        self.posterior_loc.shape)
    aux_loc = tf.zeros_like(self.posterior_loc)
    posterior_loc, posterior_variance = self.posterior_loc, self.posterior_variance
    prior_loc = self.conditional_prior_loc
    marginal_loc, marginal_variance = conditionals.auxiliary_marginal(
        posterior_loc, posterior_variance, prior_loc, prior_variance, aux_loc, aux_variance,
        residual_variance)
    aux_value = marginal_loc + tf.sqrt(marginal_variance) * noise
    log_ratio = self._reduce_event(
        conditionals.normal_log_prob(aux_value, marginal_loc, marginal_variance)
        - conditionals.normal_log_prob(aux_value, aux_loc, aux_variance))
    new_loc, new_variance = conditionals.posterior_given_auxiliary(
        aux_value, posterior_loc, posterior_variance, prior_loc, prior_variance, aux_loc,
        aux_variance, residual_variance)
    new_prior_loc, _ = conditionals.prior_given_auxiliary(
        aux_value, prior_loc, prior_variance, aux_loc, aux_variance)
    self.posterior_loc.assign(new_loc)
    self.untransformed_posterior_scale.assign(softplus_inverse(tf.sqrt(new_variance)))
    self.conditional_prior_loc.assign(new_prior_loc)
    self.remaining_prior_fraction.assign(
        remaining_fraction * tf.ones_like(self.remaining_prior_fraction))
    return log_ratio
