"""Normal and Cauchy additive auxiliary variables, and the quadrature that conditions on them.

A block of unknowns w with prior family(0, scale) from a family closed under
sums of independent copies ("stable": Normal scales add in quadrature, Cauchy
scales add) splits into K i.i.d. auxiliaries a_k with the split scale; after
fixing a_1..k the rest is one residual r = sum_{j>k} a_j of the same family.
For a variational q(r), these functions draw a_k ~ q_{k-1}(a_k) = int q(r)
p(a_k | r) dr, give log q_{k-1}(a_k), and the conditional q(r' | a_k) (paper
Sections 2.4-2.5, Proposition 1):

  Normal blocks: q(r) Gaussian; q(r' | a) is Gaussian again (moments by quadrature).
  Cauchy blocks: q(r) ∝ N(r; m, s²) p_rest(r) / p_prior(r + A), A the sum of the fixed
      auxiliaries (`tilted.TiltedGaussian`); conditioning on a gives the same form with
      m - a, A + a and the smaller residual prior: the exact conditional, which a Gaussian
      cannot hold (it is bimodal when a lands away from q's mass).

a_k | r is drawn by inverse CDF on a dense grid; every function works through
the elements in chunks, so memory stays bounded.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf

from auxiliary_sampling.conditionals import normal_log_prob
from auxiliary_sampling.tilted import TiltedGaussian

FAMILIES = ("normal", "cauchy")
_GRID_SIZE = 2049
_CHUNK = 4096   # elements per quadrature batch: [4096, 2049] float64 arrays are 67 MB


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


def log_prob_np(block: StableBlock, value, scale) -> np.ndarray:
  """`block.log_prob` in float64 on NumPy arrays."""
  return np.asarray(block.log_prob(tf.constant(value, tf.float64), tf.constant(scale, tf.float64)))


def residual_tilted_gaussian(block: StableBlock, loc, scale, fixed_sum,
                             residual_scale: float) -> TiltedGaussian:
  """q(r) ∝ N(r; loc, scale²) p_residual(r) / p_prior(r + fixed_sum) element-wise (all [n])."""
  fixed_sum = tf.constant(np.asarray(fixed_sum, np.float64)[:, None])
  residual_scale64 = tf.constant(residual_scale, tf.float64)
  prior_scale = tf.constant(block.scale, tf.float64)

  def log_tilt(r):
    return block.log_prob(r, residual_scale64) - block.log_prob(r + fixed_sum, prior_scale)
  return TiltedGaussian(loc, scale, log_tilt, anchors=[(0.0, residual_scale)])


def sample_auxiliary_tilted(block: StableBlock, loc: np.ndarray, scale: np.ndarray,
                            fixed_sum: np.ndarray, one: float, rest: float, total: float,
                            rng: np.random.Generator):
  """a ~ int q(r) p(a | r) dr element-wise for the tilted q(r) of `residual_tilted_gaussian`.

  q(r) has residual scale `total`. Returns (a, log q(a)); q(r' | a) is the
  tilted family with loc - a and the fixed sum plus a.
  """
  if not rest > 0:
    raise ValueError(f"rest={rest!r} must be > 0: the last auxiliary is the residual itself")
  rest64, total64 = tf.constant(rest, tf.float64), tf.constant(total, tf.float64)
  draws, log_qs = [], []
  for start in range(0, len(loc), _CHUNK):
    chunk = slice(start, start + _CHUNK)
    residual = residual_tilted_gaussian(block, loc[chunk], scale[chunk], fixed_sum[chunk], total)
    uniforms = rng.uniform(1e-12, 1.0 - 1e-12, size=[len(loc[chunk]), 1])
    residual_draw = residual.sample(uniforms).numpy()[:, 0]
    draw = _draw_given_residual(block, residual_draw, one, rest, rng)
    draw_column = tf.constant(draw[:, None])

    def log_ratio(r):
      return block.log_prob(r - draw_column, rest64) - block.log_prob(r, total64)
    log_expectation = residual.log_expectation(log_ratio, anchors=[(draw, rest)]).numpy()
    draws.append(draw)
    log_qs.append(log_prob_np(block, draw, one) + log_expectation)
  return np.concatenate(draws), np.concatenate(log_qs)


def sample_auxiliary(block: StableBlock, loc: np.ndarray, scale: np.ndarray, one: float,
                     rest: float, total: float, rng: np.random.Generator):
  """a ~ int N(r; loc, scale^2) p(a | r) dr element-wise for a Normal block.

  Here r = a + r' with a ~ N(0, one²) and r' ~ N(0, rest²). Returns (a, log q(a), loc and
  scale of q(r' | a)), which is Gaussian (computed by quadrature, exact up to discretisation).
  """
  if block.family != "normal":
    raise ValueError(f"sample_auxiliary needs a normal block, got {block.family!r}; "
                     "use sample_auxiliary_tilted")
  if not rest > 0:
    raise ValueError(f"rest={rest!r} must be > 0: the last auxiliary is the residual itself")
  chunks = [_sample_auxiliary_chunk(block, loc[start:start + _CHUNK], scale[start:start + _CHUNK],
                                    one, rest, total, rng)
            for start in range(0, len(loc), _CHUNK)]
  return tuple(np.concatenate(parts) for parts in zip(*chunks))


def _draw_given_residual(block: StableBlock, residual: np.ndarray, one: float, rest: float,
                         rng: np.random.Generator) -> np.ndarray:
  """a ~ p(a | r) ∝ p_one(a) p_rest(r - a) element-wise, by inverse CDF on a tan-spaced grid."""
  width = one + rest
  u = np.linspace(-np.pi / 2, np.pi / 2, _GRID_SIZE + 2)[1:-1]
  grid = residual[:, None] / 2 + width * np.tan(u)[None, :]                      # [n, G]
  log_density = (log_prob_np(block, grid, one) + log_prob_np(block, residual[:, None] - grid, rest)
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
  log_ratio = log_prob_np(block, r - draw[:, None], rest) - log_prob_np(block, r, total)
  log_terms = log_weight + log_ratio
  shift = log_terms.max(axis=1, keepdims=True)
  terms = np.exp(log_terms - shift)
  log_q = log_prob_np(block, draw, one) + np.log(terms.sum(axis=1)) + shift[:, 0]
  posterior = terms / terms.sum(axis=1, keepdims=True)
  new_residual = r - draw[:, None]
  new_loc = (posterior * new_residual).sum(axis=1)
  new_scale = np.sqrt(np.maximum(
      (posterior * (new_residual - new_loc[:, None]) ** 2).sum(axis=1), 1e-12))
  return draw, log_q, new_loc, new_scale
