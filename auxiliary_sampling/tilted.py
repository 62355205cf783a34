"""A Gaussian tilted by a known positive function, element-wise on a grid.

q(r) ∝ N(r; loc, scale²) h(r).

Non-Gaussian refinement (`stable_auxiliaries.py`) needs it for auxiliaries whose prior is
not Normal. Conditioning a Gaussian q(r) on a Cauchy auxiliary gives the exact
conditional N(r'; loc - a, scale²) p_rest(r') / p_prior(r' + a), which no
Gaussian holds; with h(r) = p_rest(r) / p_prior(r + A), A the sum of the fixed
auxiliaries, the family is closed under conditioning (the tilt telescopes), so
Proposition 1's assumption holds and refinement starts every stage from the
exact conditional.

Each element has its own sorted grid: a linear one over loc ± 10 scale (the
Gaussian factor) merged with tan-spaced ones around `anchors` (where h or an
integrand has features narrower than the Gaussian, such as the p_rest bump of
width `rest` at 0). Integrals use the trapezoid rule; the CDF is piecewise
linear between nodes. Draws are reparameterised implicitly: for r = F⁻¹(u; θ),
dr/dθ = -∂F(r; θ)/∂θ / q(r), so gradients of expectations flow to loc and scale.
Everything is float64; the grid nodes carry no gradient (the integrals do not
depend on where the nodes are, up to discretisation).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from auxiliary_sampling.conditionals import normal_log_prob

LogTiltFn = Callable[[tf.Tensor], tf.Tensor]   # r [n, X] -> log h(r) [n, X]
Anchor = tuple   # (centre [n] or scalar, width [n] or scalar)

_LINEAR_HALF_WIDTH = 10.0   # Gaussian standard deviations covered by the linear part of the grid


def _column(value, n: int) -> tf.Tensor:
  return tf.broadcast_to(tf.reshape(tf.cast(value, tf.float64), [-1, 1]), [n, 1])


def _grid(loc: tf.Tensor, scale: tf.Tensor, anchors: Sequence[Anchor], size: int) -> tf.Tensor:
  """[n, G] sorted nodes.

  `size` linear over loc ± 10 scale, plus `size` tan-spaced ones per anchor.
  """
  n = tf.shape(loc)[0]
  linear = tf.linspace(tf.constant(-_LINEAR_HALF_WIDTH, tf.float64), _LINEAR_HALF_WIDTH, size)
  parts = [loc[:, None] + scale[:, None] * linear[None, :]]
  tangent = tf.constant(np.tan(np.linspace(-math.pi / 2, math.pi / 2, size + 2)[1:-1]), tf.float64)
  for centre, width in anchors:
    parts.append(_column(centre, n) + _column(width, n) * tangent[None, :])
  return tf.stop_gradient(tf.sort(tf.concat(parts, axis=1), axis=1))


def log_trapezoid(nodes: tf.Tensor, log_values: tf.Tensor) -> tf.Tensor:
  """log ∫ exp(log_values) over each row's nodes by the trapezoid rule. [n, G] -> [n].

  Stable for any magnitude.
  """
  shift = tf.stop_gradient(tf.reduce_max(log_values, axis=1, keepdims=True))
  values = tf.exp(log_values - shift)
  cells = 0.5 * (values[:, 1:] + values[:, :-1]) * (nodes[:, 1:] - nodes[:, :-1])
  return tf.math.log(tf.reduce_sum(cells, axis=1)) + shift[:, 0]


class TiltedGaussian:
  """q(r) ∝ N(r; loc, scale²) h(r) for n independent elements (loc, scale: [n], differentiable)."""

  def __init__(self, loc, scale, log_tilt_fn: LogTiltFn, anchors: Sequence[Anchor] = (),
               grid_size: int = 256):
    self.loc = tf.cast(loc, tf.float64)
    self.scale = tf.cast(scale, tf.float64)
    self.log_tilt_fn = log_tilt_fn
    self.anchors = tuple(anchors)
    self.grid_size = grid_size
    self.nodes = _grid(self.loc, self.scale, self.anchors, grid_size)
    self.log_unnormalized = self._log_unnormalized(self.nodes)
    self.log_normalizer = log_trapezoid(self.nodes, self.log_unnormalized)
    density = tf.exp(self.log_unnormalized - self.log_normalizer[:, None])
    cells = 0.5 * (density[:, 1:] + density[:, :-1]) * (self.nodes[:, 1:] - self.nodes[:, :-1])
    self.cdf = tf.concat(
        [tf.zeros_like(cells[:, :1]), tf.cumsum(cells, axis=1)], axis=1)  # [n, G], ends at 1

  def _log_unnormalized(self, r: tf.Tensor) -> tf.Tensor:
    return normal_log_prob(r, self.loc[:, None],
                           tf.square(self.scale)[:, None]) + self.log_tilt_fn(r)

  def log_prob(self, r) -> tf.Tensor:
    """Normalised log q(r) at r [n, S]."""
    return self._log_unnormalized(tf.cast(r, tf.float64)) - self.log_normalizer[:, None]

  def sample(self, uniforms) -> tf.Tensor:
    """r = F⁻¹(u) for u [n, S] in (0, 1).

    With implicit reparameterisation gradients to loc and scale.
    """
    uniforms = tf.cast(uniforms, tf.float64)
    cdf = tf.stop_gradient(self.cdf)
    last_cell = tf.shape(cdf)[1] - 2
    index = tf.clip_by_value(tf.searchsorted(cdf, uniforms, side="right") - 1, 0, last_cell)
    low_node, high_node = (tf.gather(self.nodes, index + i, batch_dims=1) for i in (0, 1))
    low_cdf, high_cdf = (tf.gather(self.cdf, index + i, batch_dims=1) for i in (0, 1))
    cell_mass = tf.stop_gradient(high_cdf - low_cdf)
    width = high_node - low_node
    fraction = tf.clip_by_value(
        (uniforms - tf.stop_gradient(low_cdf)) / tf.maximum(cell_mass, 1e-300), 0.0, 1.0)
    draws = tf.stop_gradient(low_node + fraction * width)
    # F(r; θ) at the (fixed) draw, differentiable in θ through the node CDF values; its slope in r
    # is the cell density, so draws - (F_θ - stop(F_θ)) / density has the
    # implicit-reparameterisation gradient.
    cdf_at_draws = low_cdf + fraction * (high_cdf - low_cdf)
    density = tf.maximum(cell_mass / tf.maximum(width, 1e-300), 1e-300)
    return draws - (cdf_at_draws - tf.stop_gradient(cdf_at_draws)) / density

  def log_expectation(self, log_integrand_fn: LogTiltFn,
                      anchors: Sequence[Anchor] = ()) -> tf.Tensor:
    """log E_q[g(r)] per element by quadrature, for g = exp(log_integrand_fn).

    `anchors` resolve g's features.
    """
    nodes = _grid(self.loc, self.scale, self.anchors + tuple(anchors), self.grid_size)
    return log_trapezoid(
        nodes,
        self._log_unnormalized(nodes) + log_integrand_fn(nodes)) - self.log_normalizer
