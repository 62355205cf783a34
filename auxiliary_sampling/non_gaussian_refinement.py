"""Refinement for non-Gaussian (Normal / Cauchy) auxiliary decompositions of any log joint.

The paper's results hold for any p(w, a_1..K) with w = sum_k a_k (or a function
of it) and p(w) unchanged (Sections 2.4-2.5, 3). Here the unknowns come in
blocks whose prior family is closed under sums (`stable_auxiliaries`), and the
variational family over the residual r holds the exact conditional after every
conditioning step (the assumption of Proposition 1), so each stage starts from
q_{k-1} conditioned on a_k and its refit can only raise the ELBO. So K = 1 is
plain mean-field VI and every K starts from the same fit. Step k (Algorithm 1):

  draw a_k ~ q_{k-1}(a_k) and compute log q_{k-1}(a_k) (`stable_auxiliaries`);
  q_k(r') := q_{k-1}(r' + a_k | a_k), then T Adam steps on the conditional ELBO.

  ELBO_aux = E[log p(y, a_1..K-1, r)] - E[log q(r)] - sum_{k<K} log q_{k-1}(a_k)   (paper Eq. 13)

The log joint log p(y, a_1..k, r) comes from the caller (for example an Edward2
program), so the model is never re-derived here. All members (sample paths) run
on a leading axis with their own noise rows. `refine_non_gaussian` returns the
same `RefinementResult` as `refine()`.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.conditionals import normal_log_prob
from auxiliary_sampling.graph_loops import counted_loop, graph_function
from auxiliary_sampling.noise import MemberNoise, derived_seed
from auxiliary_sampling.refinement_result import RefinementResult
from auxiliary_sampling.stable_auxiliaries import (StableBlock, log_prob_np,
                                                   residual_tilted_gaussian, sample_auxiliary,
                                                   sample_auxiliary_tilted)
from auxiliary_sampling.tilted import TiltedGaussian
from common.validation import check_integer

# log p(y, a_1..k, r): fixed {block: [B, k, *event]} and residual {block: [B, *event]} -> [B].
LogJointFn = Callable[[int, Mapping[str, tf.Tensor], Mapping[str, tf.Tensor]], tf.Tensor]


class NonGaussianRefinement(tf.Module):
  """The state of M sample paths: fixed auxiliaries, q(r) per block, and the compiled fits."""

  def __init__(self, blocks: Sequence[StableBlock], log_joint_fn: LogJointFn, num_auxiliary: int,
               num_members: int, num_mc_samples: int = 16, initial_scale: float = 0.1,
               seed: int = 0):
    super().__init__(name="non_gaussian_refinement")
    self.blocks = list(blocks)
    self.log_joint_fn = log_joint_fn
    self.num_auxiliary = check_integer("num_auxiliary", num_auxiliary)
    self.num_members = check_integer("num_members", num_members)
    self.num_mc_samples = check_integer("num_mc_samples", num_mc_samples)
    self.num_fixed = 0
    untransformed = float(np.log(np.expm1(initial_scale)))
    # q(r) is parameterised relative to the residual's prior scale, which shrinks as auxiliaries
    # are fixed (sqrt(1/K) of the prior for Normal blocks, 1/K for Cauchy ones at the last step):
    # Adam's step is then equally fine at every stage.
    self.standardized_loc, self.untransformed_standardized_scale, self.fixed = {}, {}, {}
    for block in self.blocks:
      shape = [num_members, *block.event_shape]
      self.standardized_loc[block.name] = tf.Variable(tf.zeros(shape), name=f"{block.name}_loc")
      self.untransformed_standardized_scale[block.name] = tf.Variable(
          tf.fill(shape, untransformed), name=f"{block.name}_scale")
      self.fixed[block.name] = np.zeros([num_members, 0, *block.event_shape], np.float32)
    self.noise = MemberNoise(num_members, name="residual_noise")
    self.noise.set_seed(derived_seed(seed, 1))
    self.rng = np.random.default_rng(derived_seed(seed, 2))
    self.variables_to_train = [
        v for b in self.blocks
        for v in (self.standardized_loc[b.name], self.untransformed_standardized_scale[b.name])]
    self.optimizer = Adam(self.variables_to_train)
    self._fit_functions = {}

  def location(self, block: StableBlock) -> tf.Tensor:
    """The mean of q(r), [M, *event]."""
    return self.residual_scale(block) * self.standardized_loc[block.name]

  def scale(self, block: StableBlock) -> tf.Tensor:
    """The standard deviation of q(r), [M, *event]."""
    untransformed = self.untransformed_standardized_scale[block.name]
    return self.residual_scale(block) * tf.nn.softplus(untransformed)

  def residual_scale(self, block: StableBlock) -> float:
    return block.split_scale((self.num_auxiliary - self.num_fixed) / self.num_auxiliary)

  def conditional_elbo(self, num_samples: int) -> tf.Tensor:
    """Per member, E_q(r)[log p(y, a_1..k, r) - log q(r)] by `num_samples` reparameterised draws."""
    residual, fixed, log_q = {}, {}, 0.0
    for block in self.blocks:
      draws, log_density = self._draw_residual(block, num_samples)
      log_q += tf.reduce_sum(tf.reshape(log_density, [self.num_members, num_samples, -1]), axis=-1)
      residual[block.name] = tf.reshape(draws, [self.num_members * num_samples, *block.event_shape])
      repeated = np.repeat(self.fixed[block.name], num_samples, axis=0)
      fixed[block.name] = tf.constant(repeated)
    log_joint = tf.reshape(self.log_joint_fn(self.num_fixed, fixed, residual),
                           [self.num_members, num_samples])
    return tf.reduce_mean(log_joint - log_q, axis=1)

  def _is_tilted(self, block: StableBlock) -> bool:
    return block.family == "cauchy" and self.num_fixed > 0   # before any conditioning the tilt is 1

  def _draw_residual(self, block: StableBlock, num_samples: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Reparameterised draws r ~ q(r) and log q(r), both [M, num_samples, *event]."""
    loc, scale = self.location(block)[:, None], self.scale(block)[:, None]
    noise = self.noise.normal([num_samples, *block.event_shape])
    if not self._is_tilted(block):
      draws = loc + scale * noise
      return draws, normal_log_prob(draws, loc, tf.square(scale))
    # Element-major [n, S] for the per-element grids, with u = Phi(noise) as the uniforms.
    rank = len(block.event_shape)
    to_elements = [0, *range(2, rank + 2), 1]
    uniforms = 0.5 * tf.math.erfc(-tf.cast(noise, tf.float64) / math.sqrt(2.0))
    uniforms = tf.reshape(tf.transpose(uniforms, to_elements), [-1, num_samples])
    uniforms = tf.clip_by_value(uniforms, 1e-12, 1.0 - 1e-12)
    distribution = self.tilted_residual(block)
    draws = distribution.sample(uniforms)
    log_density = distribution.log_prob(draws)
    from_elements = [0, rank + 1, *range(1, rank + 1)]
    shape = [self.num_members, *block.event_shape, num_samples]
    return tuple(tf.cast(tf.transpose(tf.reshape(x, shape), from_elements), tf.float32)
                 for x in (draws, log_density))

  def tilted_residual(self, block: StableBlock) -> TiltedGaussian:
    """q(r) of a Cauchy block over its M * prod(event) elements, differentiable in its Gaussian."""
    return residual_tilted_gaussian(
        block, tf.reshape(self.location(block), [-1]), tf.reshape(self.scale(block), [-1]),
        self.fixed[block.name].sum(axis=1).reshape(-1), self.residual_scale(block))

  def _fit_function(self):
    if self.num_fixed not in self._fit_functions:   # the log joint's structure depends on k
      @graph_function
      def fit(num_steps, learning_rate):
        def step_of(step, trace):
          with tf.GradientTape() as tape:
            elbo = self.conditional_elbo(self.num_mc_samples)
            loss = -tf.reduce_sum(elbo)   # members are independent
          # Linear decay to zero: each fit ends at its optimum rather than at Adam's noise floor,
          # whose ELBO loss would otherwise be charged to every refinement stage.
          decay = 1.0 - tf.cast(step, tf.float32) / tf.cast(num_steps, tf.float32)
          self.optimizer.apply(tape.gradient(loss, self.variables_to_train), learning_rate * decay)
          return (trace.write(step, elbo),)
        return counted_loop(num_steps, step_of,
                            (tf.TensorArray(tf.float32, size=num_steps),))[0].stack()
      self._fit_functions[self.num_fixed] = fit
    return self._fit_functions[self.num_fixed]

  def fit(self, num_steps: int, learning_rate: float) -> np.ndarray:
    """Re-fits q(r) with a fresh Adam, learning rate decayed linearly to zero.

    Returns the [num_steps, M] trace of conditional-ELBO estimates.
    """
    self.optimizer.reset()
    if num_steps == 0:
      return np.zeros([0, self.num_members], np.float32)
    trace = self._fit_function()(tf.constant(num_steps),
                                 tf.constant(learning_rate, tf.float32)).numpy()
    if not np.all(np.isfinite(trace)):
      raise FloatingPointError(f"non-finite conditional ELBO after {self.num_fixed} fixed "
                               f"auxiliaries (learning rate {learning_rate:g})")
    return trace

  def condition_next(self) -> tuple[np.ndarray, np.ndarray]:
    """Draws a_k ~ q_{k-1}(a_k) for every element, fixes it and moves q(r) to q(r | a_k).

    Returns log q_{k-1}(a_k) and log p(a_k), each summed per member, [M].
    """
    if self.num_fixed >= self.num_auxiliary - 1:
      raise ValueError(f"all {self.num_auxiliary - 1} conditioning steps are done")
    log_q_total, log_prior_total = np.zeros([self.num_members]), np.zeros([self.num_members])
    for block in self.blocks:
      loc = self.location(block).numpy().astype(np.float64).ravel()
      scale = self.scale(block).numpy().astype(np.float64).ravel()
      one = block.split_scale(1.0 / self.num_auxiliary)
      rest = block.split_scale((self.num_auxiliary - self.num_fixed - 1) / self.num_auxiliary)
      total = self.residual_scale(block)
      if block.family == "normal":
        draw, log_q, new_loc, new_scale = sample_auxiliary(block, loc, scale, one, rest, total,
                                                           self.rng)
      else:   # the tilted family: the exact conditional has the same Gaussian factor, moved by a
        fixed_sum = self.fixed[block.name].sum(axis=1).astype(np.float64).ravel()
        draw, log_q = sample_auxiliary_tilted(block, loc, scale, fixed_sum, one, rest, total,
                                              self.rng)
        new_loc, new_scale = loc - draw, scale
      shape = [self.num_members, *block.event_shape]
      log_q_total += log_q.reshape(self.num_members, -1).sum(axis=1)
      log_prior_total += log_prob_np(block, draw, one).reshape(self.num_members, -1).sum(axis=1)
      self.fixed[block.name] = np.concatenate(
          [self.fixed[block.name], draw.reshape(shape)[:, None].astype(np.float32)], axis=1)
      standardized_scale = np.maximum(new_scale / rest, 1e-6)
      self.standardized_loc[block.name].assign((new_loc / rest).reshape(shape).astype(np.float32))
      self.untransformed_standardized_scale[block.name].assign(
          np.log(np.expm1(standardized_scale)).reshape(shape).astype(np.float32))
    self.num_fixed += 1
    return log_q_total, log_prior_total

  def sample(self) -> dict[str, np.ndarray]:
    """The unknowns: sum of the fixed auxiliaries plus a draw of the residual from q(r)."""
    samples = {}
    for block in self.blocks:
      residual, _ = self._draw_residual(block, 1)
      samples[block.name] = self.fixed[block.name].sum(axis=1) + residual.numpy()[:, 0]
    return samples


def refine_non_gaussian(blocks: Sequence[StableBlock], log_joint_fn: LogJointFn, *,
                        num_auxiliary: int, num_samples: int, initial_steps: int = 3000,
                        steps_per_auxiliary: int = 500, learning_rate: float = 1e-2,
                        num_mc_samples: int = 16, elbo_num_samples: int = 256,
                        initial_scale: float = 0.1, seed: int = 0) -> RefinementResult:
  """Draws `num_samples` refined samples of the blocks' unknowns (paper Algorithm 1).

  Mean-field VI on the unknowns (`initial_steps` Adam steps), then K - 1 steps
  of Algorithm 1 with `steps_per_auxiliary` steps each; one sample path per
  member. Every fit restarts Adam at `learning_rate`, decayed linearly to zero.
  The result's `model` is the final `NonGaussianRefinement`, its `samples` one
  draw of the unknowns per member, and its trace starts with the initial fit.
  """
  initial_steps = check_integer("initial_steps", initial_steps, minimum=0)
  steps_per_auxiliary = check_integer("steps_per_auxiliary", steps_per_auxiliary, minimum=0)
  started = time.perf_counter()
  refinement = NonGaussianRefinement(blocks, log_joint_fn, num_auxiliary, num_samples,
                                     num_mc_samples, initial_scale, seed)
  traces = [refinement.fit(initial_steps, learning_rate)]
  initial_elbo = refinement.conditional_elbo(elbo_num_samples).numpy()
  log_q, log_prior = np.zeros([0, num_samples]), np.zeros([0, num_samples])
  for _ in range(num_auxiliary - 1):
    stage_log_q, stage_log_prior = refinement.condition_next()
    log_q, log_prior = np.vstack([log_q, stage_log_q]), np.vstack([log_prior, stage_log_prior])
    # The conditional ELBO includes log p(a_1..k); ELBO_aux so far also subtracts log q(a_1..k).
    traces.append(refinement.fit(steps_per_auxiliary, learning_rate) - log_q.sum(axis=0))
  final_elbo = refinement.conditional_elbo(elbo_num_samples).numpy().astype(np.float64)
  samples = refinement.sample()
  return RefinementResult(
      model=refinement, elbo_aux=final_elbo - log_q.sum(axis=0), initial_elbo=initial_elbo,
      log_ratios=log_q - log_prior, trace=np.concatenate(traces),
      learning_rates=[learning_rate] * num_auxiliary,
      timings={"refine_seconds": time.perf_counter() - started}, samples=samples)
