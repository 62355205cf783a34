"""Refinement for additive auxiliary variables with non-Gaussian priors (paper Sections 2.4-2.5, 3).

The paper's results hold for any p(w, a_1..K) with w = sum_k a_k (or a function
of it) and p(w) unchanged. This module handles unknowns w (blocks of them)
whose prior family is closed under sums of independent copies ("stable"):
Normal (scales add in quadrature) and Cauchy (scales add), so that K i.i.d.
auxiliaries a_k with the split scale sum to the original prior, and after
fixing a_1..k the rest is one residual r = sum_{j>k} a_j with a prior of the
same family. The variational family over r is, per block element, the one
that holds the exact conditional after every conditioning step (the
assumption of Proposition 1), so refinement starts each stage from q_{k-1}
conditioned on a_k and its refit can only raise the ELBO:

  Normal blocks: a Gaussian q(r) (the paper's q(w)); conditioning keeps it Gaussian.
  Cauchy blocks: q(r) ∝ N(r; m, s²) p_rest(r) / p_prior(r + A), A the sum of the fixed
      auxiliaries (`tilted.TiltedGaussian`). Conditioning on a maps it to the same form
      with m - a, A + a and the smaller residual prior: the exact conditional, which a
      Gaussian cannot hold (it is bimodal when a lands away from q's mass). Before any
      conditioning the tilt is 1.

So K = 1 is plain mean-field VI and every K starts from the same fit. Step k (Algorithm 1):

  draw a_k ~ q_{k-1}(a_k) = int q(r) p(a_k | r) dr: r ~ q(r), then a_k | r,
      p(a_k | r) ∝ p_1(a_k) p_rest(r - a_k), by inverse CDF on a dense grid;
  log q_{k-1}(a_k) = log p_1(a_k) + log E_q[p_rest(r - a_k) / p_r(r)] (dense quadrature);
  q_k(r') := q_{k-1}(r' + a_k | a_k), then T Adam steps on the conditional ELBO.

  ELBO_aux = E[log p(y, a_1..K-1, r)] - E[log q(r)] - sum_{k<K} log q_{k-1}(a_k)   (paper Eq. 13)

The log joint log p(y, a_1..k, r) comes from the caller (for example an Edward2
program), so the model is never re-derived here. All members (sample paths) run
on a leading axis with their own noise rows.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from auxiliary_sampling.conditionals import normal_log_prob
from auxiliary_sampling.noise import MemberNoise, derived_seed
from auxiliary_sampling.adam import Adam
from auxiliary_sampling.tilted import TiltedGaussian

FAMILIES = ("normal", "cauchy")
_GRID_SIZE = 2049
_CHUNK = 4096   # elements per quadrature batch in sample_auxiliary: [4096, 2049] float64 arrays are 67 MB


@dataclasses.dataclass(frozen=True)
class StableBlock:
  """Unknowns of one event shape with prior family(0, scale), split into K additive auxiliaries."""

  name: str
  family: str
  scale: float
  event_shape: tuple[int, ...] = ()

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"unknown prior family {self.family!r}; allowed: {', '.join(FAMILIES)}")
    if not self.scale > 0:
      raise ValueError(f"scale={self.scale!r} must be > 0")

  def split_scale(self, fraction: float) -> float:
    """Scale of a sum of `fraction` * K of the K auxiliaries (Normal: sqrt; Cauchy: linear)."""
    return self.scale * (math.sqrt(fraction) if self.family == "normal" else fraction)

  def log_prob(self, value, scale):
    """log family(value; 0, scale), element-wise."""
    if self.family == "normal":
      return normal_log_prob(value, 0.0, tf.square(scale))
    return -math.log(math.pi) - tf.math.log(scale) - tf.math.log1p(tf.square(value / scale))


# log p(y, a_1..k, r): fixed {block: [B, k, *event]} and residual {block: [B, *event]} -> [B].
LogJointFn = Callable[[int, Mapping[str, tf.Tensor], Mapping[str, tf.Tensor]], tf.Tensor]


@dataclasses.dataclass
class StableRefinementResult:
  samples: dict[str, np.ndarray]     # block -> [M, *event]: the refined draws of the unknowns (sum of a_1..K)
  elbo_aux: np.ndarray               # [M] per sample path
  initial_elbo: float                # the mean-field ELBO (K = 1)
  log_q_auxiliary: np.ndarray        # [K-1, M] log q_{k-1}(a_k)
  trace: np.ndarray                  # [steps, M] conditional-ELBO estimates of every fit
  timings: dict[str, float]

  @property
  def elbo_aux_estimate(self) -> float:
    return float(np.mean(self.elbo_aux))


class StableRefinement(tf.Module):
  """The state of M sample paths: fixed auxiliaries, q(r) per block, and the compiled fits."""

  def __init__(self, blocks: Sequence[StableBlock], log_joint_fn: LogJointFn, num_auxiliary: int,
               num_members: int, num_mc_samples: int = 16, initial_scale: float = 0.1, seed: int = 0):
    super().__init__(name="stable_refinement")
    for name, value in (("num_auxiliary", num_auxiliary), ("num_members", num_members),
                        ("num_mc_samples", num_mc_samples)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")
    self.blocks = list(blocks)
    self.log_joint_fn = log_joint_fn
    self.num_auxiliary, self.num_members, self.num_mc_samples = num_auxiliary, num_members, num_mc_samples
    self.num_fixed = 0
    untransformed = float(np.log(np.expm1(initial_scale)))
    # q(r) is parameterised relative to the residual's prior scale, which shrinks as auxiliaries are fixed
    # (sqrt(1/K) of the prior for Normal blocks, 1/K for Cauchy ones at the last step): Adam's step is then
    # equally fine at every stage.
    self.standardized_loc, self.untransformed_standardized_scale, self.fixed = {}, {}, {}
    for block in self.blocks:
      shape = [num_members, *block.event_shape]
      self.standardized_loc[block.name] = tf.Variable(tf.zeros(shape), name=f"{block.name}_loc")
      self.untransformed_standardized_scale[block.name] = tf.Variable(tf.fill(shape, untransformed),
                                                                      name=f"{block.name}_scale")
      self.fixed[block.name] = np.zeros([num_members, 0, *block.event_shape], np.float32)
    self.noise = MemberNoise(num_members, name="residual_noise")
    self.noise.set_seed(derived_seed(seed, 1))
    self.rng = np.random.default_rng(derived_seed(seed, 2))
    self.variables_to_train = [v for b in self.blocks
                               for v in (self.standardized_loc[b.name], self.untransformed_standardized_scale[b.name])]
    self.optimizer = Adam(self.variables_to_train)
    self._fit_functions = {}

  def location(self, block: StableBlock) -> tf.Tensor:
    """The mean of q(r), [M, *event]."""
    return self.residual_scale(block) * self.standardized_loc[block.name]

  def scale(self, block: StableBlock) -> tf.Tensor:
    """The standard deviation of q(r), [M, *event]."""
    return self.residual_scale(block) * tf.nn.softplus(self.untransformed_standardized_scale[block.name])

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
    log_joint = tf.reshape(self.log_joint_fn(self.num_fixed, fixed, residual), [self.num_members, num_samples])
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
    """q(r) of a Cauchy block over its M * prod(event) elements, differentiable in its Gaussian factor."""
    return residual_tilted_gaussian(block, tf.reshape(self.location(block), [-1]), tf.reshape(self.scale(block), [-1]),
                                    self.fixed[block.name].sum(axis=1).reshape(-1), self.residual_scale(block))

  def _fit_function(self):
    if self.num_fixed not in self._fit_functions:   # the log joint's structure depends on k
      @tf.function
      def fit(num_steps, learning_rate):
        trace = tf.TensorArray(tf.float32, size=num_steps)
        for step in tf.range(num_steps):
          with tf.GradientTape() as tape:
            elbo = self.conditional_elbo(self.num_mc_samples)
            loss = -tf.reduce_sum(elbo)   # members are independent
          # Linear decay to zero: each fit ends at its optimum rather than at Adam's noise floor, whose
          # ELBO loss would otherwise be charged to every refinement stage.
          decay = 1.0 - tf.cast(step, tf.float32) / tf.cast(num_steps, tf.float32)
          self.optimizer.apply(tape.gradient(loss, self.variables_to_train), learning_rate * decay)
          trace = trace.write(step, elbo)
        return trace.stack()
      self._fit_functions[self.num_fixed] = fit
    return self._fit_functions[self.num_fixed]

  def fit(self, num_steps: int, learning_rate: float) -> np.ndarray:
    """Re-fits q(r) with a fresh Adam, learning rate decayed linearly to zero; returns the [num_steps, M] trace."""
    self.optimizer.reset()
    if num_steps == 0:
      return np.zeros([0, self.num_members], np.float32)
    trace = self._fit_function()(tf.constant(num_steps), tf.constant(learning_rate, tf.float32)).numpy()
    if not np.all(np.isfinite(trace)):
      raise FloatingPointError(f"non-finite conditional ELBO after {self.num_fixed} fixed auxiliaries "
                               f"(learning rate {learning_rate:g})")
    return trace

  def condition_next(self) -> np.ndarray:
    """Draws a_k ~ q_{k-1}(a_k) for every element, fixes it, moves q(r) to q(r | a_k); returns log q_{k-1}(a_k) [M]."""
    if self.num_fixed >= self.num_auxiliary - 1:
      raise ValueError(f"all {self.num_auxiliary - 1} conditioning steps are done")
    log_q_total = np.zeros([self.num_members])
    for block in self.blocks:
      loc = self.location(block).numpy().astype(np.float64).ravel()
      scale = self.scale(block).numpy().astype(np.float64).ravel()
      one = block.split_scale(1.0 / self.num_auxiliary)
      rest = block.split_scale((self.num_auxiliary - self.num_fixed - 1) / self.num_auxiliary)
      total = self.residual_scale(block)
      if block.family == "normal":
        draw, log_q, new_loc, new_scale = sample_auxiliary(block, loc, scale, one, rest, total, self.rng)
      else:   # the tilted family: the exact conditional has the same Gaussian factor, moved by a
        fixed_sum = self.fixed[block.name].sum(axis=1).astype(np.float64).ravel()
        draw, log_q = sample_auxiliary_tilted(block, loc, scale, fixed_sum, one, rest, total, self.rng)
        new_loc, new_scale = loc - draw, scale
      shape = [self.num_members, *block.event_shape]
      log_q_total += log_q.reshape(self.num_members, -1).sum(axis=1)
      self.fixed[block.name] = np.concatenate(
          [self.fixed[block.name], draw.reshape(shape)[:, None].astype(np.float32)], axis=1)
      standardized_scale = np.maximum(new_scale / rest, 1e-6)
      self.standardized_loc[block.name].assign((new_loc / rest).reshape(shape).astype(np.float32))
      self.untransformed_standardized_scale[block.name].assign(
          np.log(np.expm1(standardized_scale)).reshape(shape).astype(np.float32))
    self.num_fixed += 1
    return log_q_total

  def sample(self) -> dict[str, np.ndarray]:
    """The unknowns: sum of the fixed auxiliaries plus a draw of the residual from q(r)."""
    samples = {}
    for block in self.blocks:
      residual, _ = self._draw_residual(block, 1)
      samples[block.name] = self.fixed[block.name].sum(axis=1) + residual.numpy()[:, 0]
    return samples


def _log_prob_np(block: StableBlock, value, scale):
  return np.asarray(block.log_prob(tf.constant(value, tf.float64), tf.constant(scale, tf.float64)))


def residual_tilted_gaussian(block: StableBlock, loc, scale, fixed_sum, residual_scale: float) -> TiltedGaussian:
  """q(r) ∝ N(r; loc, scale²) p_residual(r) / p_prior(r + fixed_sum) element-wise (all [n])."""
  fixed_sum = tf.constant(np.asarray(fixed_sum, np.float64)[:, None])
  residual_scale64, prior_scale = (tf.constant(x, tf.float64) for x in (residual_scale, block.scale))

  def log_tilt(r):
    return block.log_prob(r, residual_scale64) - block.log_prob(r + fixed_sum, prior_scale)
  return TiltedGaussian(loc, scale, log_tilt, anchors=[(0.0, residual_scale)])


def sample_auxiliary_tilted(block: StableBlock, loc: np.ndarray, scale: np.ndarray, fixed_sum: np.ndarray,
                            one: float, rest: float, total: float, rng: np.random.Generator):
  """a ~ int q(r) p(a | r) dr element-wise for the tilted q(r) of `residual_tilted_gaussian` (scale `total`).

  Returns (a, log q(a)); q(r' | a) is the tilted family with loc - a and the
  fixed sum plus a. In chunks, so memory stays bounded.
  """
  if not rest > 0:
    raise ValueError(f"rest={rest!r} must be > 0: the last auxiliary is the residual itself")
  rest64, total64 = tf.constant(rest, tf.float64), tf.constant(total, tf.float64)
  draws, log_qs = [], []
  for start in range(0, len(loc), _CHUNK):
    chunk = slice(start, start + _CHUNK)
    residual = residual_tilted_gaussian(block, loc[chunk], scale[chunk], fixed_sum[chunk], total)
    residual_draw = residual.sample(rng.uniform(1e-12, 1.0 - 1e-12, size=[len(loc[chunk]), 1])).numpy()[:, 0]
    draw = _draw_given_residual(block, residual_draw, one, rest, rng)
    draw_column = tf.constant(draw[:, None])

    def log_ratio(r):
      return block.log_prob(r - draw_column, rest64) - block.log_prob(r, total64)
    log_expectation = residual.log_expectation(log_ratio, anchors=[(draw, rest)]).numpy()
    draws.append(draw)
    log_qs.append(_log_prob_np(block, draw, one) + log_expectation)
  return np.concatenate(draws), np.concatenate(log_qs)


def sample_auxiliary(block: StableBlock, loc: np.ndarray, scale: np.ndarray, one: float, rest: float,
                     total: float, rng: np.random.Generator):
  """a ~ int N(r; loc, scale^2) p(a | r) dr element-wise, where r = a + r', a ~ N(0, one²), r' ~ N(0, rest²).

  Returns (a, log q(a), loc and scale of q(r' | a)), which is Gaussian (computed
  by quadrature, exact up to discretisation). Works through the elements in
  chunks, so memory stays bounded at any number of elements.
  """
  if block.family != "normal":
    raise ValueError(f"sample_auxiliary needs a normal block, got {block.family!r}; use sample_auxiliary_tilted")
  if not rest > 0:
    raise ValueError(f"rest={rest!r} must be > 0: the last auxiliary is the residual itself")
  chunks = [_sample_auxiliary_chunk(block, loc[start:start + _CHUNK], scale[start:start + _CHUNK], one, rest,
                                    total, rng) for start in range(0, len(loc), _CHUNK)]
  return tuple(np.concatenate(parts) for parts in zip(*chunks))


def _draw_given_residual(block: StableBlock, residual: np.ndarray, one: float, rest: float,
                         rng: np.random.Generator) -> np.ndarray:
  """a ~ p(a | r) ∝ p_one(a) p_rest(r - a) element-wise, by inverse CDF on a tan-spaced grid around 0 and r."""
  width = one + rest
  u = np.linspace(-np.pi / 2, np.pi / 2, _GRID_SIZE + 2)[1:-1]
  grid = residual[:, None] / 2 + width * np.tan(u)[None, :]                      # [n, G]
  log_density = (_log_prob_np(block, grid, one) + _log_prob_np(block, residual[:, None] - grid, rest)
                 + np.log(width) - 2 * np.log(np.cos(u))[None, :])               # density in u
  weights = np.exp(log_density - log_density.max(axis=1, keepdims=True))
  cdf = np.cumsum(weights, axis=1)
  cdf /= cdf[:, -1:]
  targets = rng.uniform(size=(len(residual), 1))
  index = np.clip((cdf < targets).sum(axis=1), 1, _GRID_SIZE - 1)
  rows = np.arange(len(residual))
  low_cdf, high_cdf = cdf[rows, index - 1], cdf[rows, index]
  fraction = np.clip((targets[:, 0] - low_cdf) / np.maximum(high_cdf - low_cdf, 1e-300), 0.0, 1.0)
  u_draw = u[index - 1] + fraction * (u[index] - u[index - 1])
  return residual / 2 + width * np.tan(u_draw)


def _sample_auxiliary_chunk(block, loc, scale, one, rest, total, rng):
  residual = loc + scale * rng.standard_normal(loc.shape)
  draw = _draw_given_residual(block, residual, one, rest, rng)
  # log q(a) and the moments of q(r | a) by quadrature over r ~ q(r): r = loc + scale z.
  z = np.linspace(-9.0, 9.0, _GRID_SIZE)
  r = loc[:, None] + scale[:, None] * z[None, :]
  log_weight = (-0.5 * z**2 - 0.5 * np.log(2 * np.pi))[None, :] + np.log(z[1] - z[0])
  log_ratio = _log_prob_np(block, r - draw[:, None], rest) - _log_prob_np(block, r, total)
  log_terms = log_weight + log_ratio
  shift = log_terms.max(axis=1, keepdims=True)
  terms = np.exp(log_terms - shift)
  log_q = _log_prob_np(block, draw, one) + np.log(terms.sum(axis=1)) + shift[:, 0]
  posterior = terms / terms.sum(axis=1, keepdims=True)
  new_residual = r - draw[:, None]
  new_loc = (posterior * new_residual).sum(axis=1)
  new_scale = np.sqrt(np.maximum((posterior * (new_residual - new_loc[:, None]) ** 2).sum(axis=1), 1e-12))
  return draw, log_q, new_loc, new_scale


def refine_stable(blocks: Sequence[StableBlock], log_joint_fn: LogJointFn, *, num_auxiliary: int,
                  num_members: int, initial_steps: int = 3000, steps_per_auxiliary: int = 500,
                  learning_rate: float = 1e-2, num_mc_samples: int = 16, elbo_num_samples: int = 256,
                  initial_scale: float = 0.1, seed: int = 0) -> StableRefinementResult:
  """Mean-field VI on the unknowns, then K - 1 steps of Algorithm 1; one sample path per member."""
  for name, value in (("initial_steps", initial_steps), ("steps_per_auxiliary", steps_per_auxiliary)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise ValueError(f"{name}={value!r} must be an integer >= 0")
  started = time.perf_counter()
  refinement = StableRefinement(blocks, log_joint_fn, num_auxiliary, num_members, num_mc_samples,
                                initial_scale, seed)
  traces = [refinement.fit(initial_steps, learning_rate)]
  initial_elbo = float(np.mean(refinement.conditional_elbo(elbo_num_samples).numpy()))
  log_q = []
  for _ in range(num_auxiliary - 1):
    log_q.append(refinement.condition_next())
    traces.append(refinement.fit(steps_per_auxiliary, learning_rate))
  final_elbo = refinement.conditional_elbo(elbo_num_samples).numpy().astype(np.float64)
  log_q = np.stack(log_q) if log_q else np.zeros([0, num_members])
  return StableRefinementResult(
      samples=refinement.sample(), elbo_aux=final_elbo - log_q.sum(axis=0), initial_elbo=initial_elbo,
      log_q_auxiliary=log_q, trace=np.concatenate(traces),
      timings={"refine_seconds": time.perf_counter() - started})
