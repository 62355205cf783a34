"""Particle posteriors: weight-space SVGD and function-space SVGD (f-SVGD).

Stein variational gradient descent (Liu & Wang 2016) moves n particles along
phi(x_i) = 1/n sum_j [k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i)], an attraction to
high posterior density plus a repulsion between particles, with an RBF kernel whose bandwidth
is set by the median heuristic. Weight-space SVGD applies it to the networks' weights; in an
over-parameterised network distant weights can be the same function, and the particles collapse
to one function (Wang et al. 2019, `../shared/related/function_space_particle_optimization.txt`,
Section 2). f-SVGD applies it to the particles' function values on a minibatch (their Eq. 4), the
function-space prior approximated by a Gaussian moment-matched to prior network draws (their
Section 3.2), and moves each network's weights by back-propagating phi as the error signal of
its outputs (their Eq. 3 and Remark 3.1).

The particles are point-weight networks on a member axis (`deep_ensemble.MemberDense`), all
seeing the same minibatch; each has its own Gaussian noise scale. Settings follow the authors'
code (thu-ml/fpovi, `ffn/bnn_stein*.py`) where the paper is silent: a N(0, 1/fan_out) prior on
every weight and bias, an inverse-Gamma(1, 0.1) prior on the noise standard deviation (in
standardised units); in weight space the noise scale is part of each particle, in function space
it is fitted by MAP beside the particle update; f-SVGD's function values are taken on the
likelihood batch plus an extra batch of training inputs perturbed by a kernel density estimate's
noise, and the Gaussian prior on `prior_points` of them (half from each batch), from
`prior_draws` prior networks, its covariance's eigenvalues floored at 1e-3.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling.elbo_maximizer import ElboMaximizer
from auxiliary_sampling.noise import MemberNoise, derived_seed
from auxiliary_sampling.predictive import gaussian_log_likelihood
from auxiliary_sampling.training_data import check_data
from baselines.deep_ensemble import MemberDense
from baselines.gaussian_head import HomoscedasticNoise, gaussian_head_log_likelihood
from baselines.learning_rate import LearningRateSchedule
from baselines.training import CheckpointedTraining, TrainingResult

# Inverse-Gamma(shape, scale) prior on the noise standard deviation (the authors' code).
NOISE_PRIOR_SHAPE, NOISE_PRIOR_SCALE = 1.0, 0.1
# Floor of the eigenvalues of the moment-matched prior covariance (the authors' jitter).
PRIOR_EIGENVALUE_FLOOR = 1e-3
BANDWIDTH_FLOOR = 1e-5
_PRIOR_STREAM = 7


@dataclasses.dataclass(frozen=True)
class FunctionSpaceSettings:
  """f-SVGD's function-space prior and evaluation points (Wang et al. 2019, Appendix B.2.1)."""

  prior_draws: int = 40      # prior networks whose function values define the Gaussian prior
  prior_points: int = 4      # points of the prior term per step, half from each batch
  extra_batch: int = 100     # perturbed training inputs added to every step's points
  kde_scale: float = 1.0     # the perturbation's std is kde_scale / sqrt(N * input dims)

  def __post_init__(self):
    checks = ((self.prior_draws >= 2, "prior_draws", ">= 2 (a covariance needs two draws)"),
              (self.prior_points >= 1, "prior_points", ">= 1"),
              (self.extra_batch >= self.prior_points - self.prior_points // 2, "extra_batch",
               f">= {self.prior_points - self.prior_points // 2} (the prior points it holds)"),
              (self.kde_scale >= 0, "kde_scale", ">= 0"))
    for holds, name, allowed in checks:
      if not holds:
        raise ValueError(f"f-SVGD {name}={getattr(self, name)!r} is not allowed; "
                         f"allowed: {allowed}")


def median_bandwidth(squared_distances: tf.Tensor) -> tf.Tensor:
  """h of the kernel exp(-d^2 / (2 h)) by the median heuristic: median(d^2) / (2 log(n + 1)),
  the median over all n^2 pairs, the diagonal included (as Liu & Wang's code takes it)."""
  values = tf.sort(tf.reshape(squared_distances, [-1]))
  count = tf.size(values)
  median = 0.5 * (values[(count - 1) // 2] + values[count // 2])
  num_particles = tf.cast(tf.shape(squared_distances)[0], values.dtype)
  return tf.maximum(median / (2.0 * tf.math.log(num_particles + 1.0)), BANDWIDTH_FLOOR)


def svgd_direction(particles: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
  """phi at every particle (Liu & Wang 2016, Eq. 8) for [n, D] particles and their [n, D]
  log-density gradients: (K scores + sum_j K_ij (x_i - x_j) / h) / n with the RBF kernel K."""
  centred = particles - tf.reduce_mean(particles, axis=0, keepdims=True)
  norms = tf.reduce_sum(tf.square(centred), axis=1)
  squared = tf.maximum(norms[:, tf.newaxis] + norms[tf.newaxis, :]
                       - 2.0 * tf.matmul(centred, centred, transpose_b=True), 0.0)
  bandwidth = tf.stop_gradient(median_bandwidth(squared))
  kernel = tf.exp(-squared / (2.0 * bandwidth))
  attraction = tf.matmul(kernel, scores)
  repulsion = (centred * tf.reduce_sum(kernel, axis=1, keepdims=True)
               - tf.matmul(kernel, centred)) / bandwidth
  return (attraction + repulsion) / tf.cast(tf.shape(particles)[0], particles.dtype)


def prior_scale(layer: MemberDense) -> float:
  """Standard deviation of the N(0, 1/fan_out) prior on a layer's kernel and bias."""
  return 1.0 / math.sqrt(layer.units)


def log_weight_prior(layers: list[MemberDense]) -> tf.Tensor:
  """[n] log N(w; 0, 1/fan_out) summed over every particle's kernels and biases."""
  total = 0.0
  for layer in layers:
    scale = prior_scale(layer)
    for weights in (layer.kernel, layer.bias):
      size = float(np.prod(weights.shape[1:]))
      squares = tf.reduce_sum(tf.reshape(tf.square(weights), [weights.shape[0], -1]), axis=1)
      total += -0.5 * squares / scale**2 - size * (math.log(scale) + 0.5 * math.log(2 * math.pi))
  return total


def log_noise_prior(scale: tf.Tensor) -> tf.Tensor:
  """log InverseGamma(scale; NOISE_PRIOR_SHAPE, NOISE_PRIOR_SCALE), element-wise."""
  shape, rate = NOISE_PRIOR_SHAPE, NOISE_PRIOR_SCALE
  return (shape * math.log(rate) - math.lgamma(shape) - (shape + 1.0) * tf.math.log(scale)
          - rate / scale)


def prior_function_draws(layers: list[MemberDense], points: tf.Tensor,
                         normals: list[tf.Tensor]) -> tf.Tensor:
  """[S, P] first outputs at `points` [P, d] of S networks drawn from the weight prior.

  `normals` holds standard normals per layer, kernel then bias ([S, in, out], [S, out]).
  """
  hidden = points[tf.newaxis]
  for index, layer in enumerate(layers):
    scale = prior_scale(layer)
    kernel, bias = scale * normals[2 * index], scale * normals[2 * index + 1]
    hidden = layer.activation(tf.matmul(hidden, kernel) + bias[:, tf.newaxis, :])
  return hidden[..., 0]


def gaussian_from_draws(draws: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """(mean [P], precision [P, P]) in float64 of the Gaussian matching [S, P] draws' first two
  moments (unbiased covariance, eigenvalues floored at PRIOR_EIGENVALUE_FLOOR)."""
  draws = tf.cast(draws, tf.float64)
  mean = tf.reduce_mean(draws, axis=0)
  centred = draws - mean
  covariance = tf.matmul(centred, centred, transpose_a=True) / tf.cast(
      tf.shape(draws)[0] - 1, tf.float64)
  eigenvalues, eigenvectors = tf.linalg.eigh(covariance)
  inverse = 1.0 / tf.maximum(eigenvalues, PRIOR_EIGENVALUE_FLOOR)
  return mean, tf.matmul(eigenvectors * inverse, eigenvectors, transpose_b=True)


def gaussian_log_density(values: tf.Tensor, mean: tf.Tensor, precision: tf.Tensor) -> tf.Tensor:
  """[n] -1/2 (v - mean)^T precision (v - mean) of [n, P] values (the constant dropped)."""
  centred = tf.cast(values, tf.float64) - mean
  quadratic = tf.reduce_sum(tf.matmul(centred, precision) * centred, axis=1)
  return tf.cast(-0.5 * quadratic, values.dtype)


def regression_particles(num_particles: int, hidden_units: int, num_hidden_layers: int = 1,
                         initial_noise_scale: float = 1.0, seed: int = 0) -> tf_keras.Sequential:
  """n particles of the UCI network: ReLU hidden layers, one output, a noise scale each."""
  layers = [MemberDense(hidden_units, num_particles, activation="relu",
                        seed=derived_seed(seed, layer)) for layer in range(num_hidden_layers)]
  layers += [MemberDense(1, num_particles, kernel_initializer="glorot_uniform",
                         seed=derived_seed(seed, num_hidden_layers)),
             HomoscedasticNoise(num_members=num_particles, initial_scale=initial_noise_scale)]
  return tf_keras.Sequential(layers)


class ParticleMaximizer(ElboMaximizer):
  """SVGD steps (weight space, or function space with `function_space` settings) with Adam.

  Adam takes -phi as the gradient (the authors' use of it). The trace holds each particle's log
  joint on the step's batch, N * mean log p(y | x) + log prior, and its "KL" the negative log
  prior (the weights' and noise's; f-SVGD's: the Gaussian function-space prior at its points).
  The particles share one device: f-SVGD's kernel needs every particle's function values.
  """

  def __init__(self, model: tf_keras.Sequential, inputs, labels, *, batch_size: int,
               data_seed: int = 0, function_space: Optional[FunctionSpaceSettings] = None,
               **kwargs):
    self.dense_layers = [layer for layer in model.layers if isinstance(layer, MemberDense)]
    noise_layers = [layer for layer in model.layers if isinstance(layer, HomoscedasticNoise)]
    if not self.dense_layers or len(noise_layers) != 1:
      raise ValueError("particles need MemberDense layers and one HomoscedasticNoise layer")
    self.noise_layer = noise_layers[0]
    self.function_space = function_space
    super().__init__(model, inputs, labels, gaussian_head_log_likelihood,
                     model.trainable_variables, batch_size=batch_size, data_seed=data_seed,
                     **kwargs)
    if self.strategy.num_replicas_in_sync > 1:
      raise ValueError("particle methods run on one device (the kernel couples every "
                       f"particle), but the strategy has {self.strategy.num_replicas_in_sync} "
                       "replicas; allowed: one replica")
    # f-SVGD's perturbations and prior networks (a stream of its own, checkpointed with the run).
    self.prior_noise = MemberNoise(None, name="function_prior_noise",
                                   initial_seed=derived_seed(data_seed, _PRIOR_STREAM))
    if function_space is not None:
      self.kde_std = function_space.kde_scale / math.sqrt(
          float(self.inputs.shape[0]) * float(np.prod(self.inputs.shape[1:])))

  @property
  def _batch_shape(self) -> list[int]:
    """The likelihood batch, then f-SVGD's extra batch."""
    extra = 0 if self.function_space is None else self.function_space.extra_batch
    return [self.batch_size + extra]

  def _log_likelihood(self, labels, values, scale) -> tf.Tensor:
    """[n] N * mean over the batch of log N(y | values, scale^2)."""
    log_likelihood = gaussian_log_likelihood(labels[..., 0], values, scale[:, tf.newaxis])
    return self._num_examples_float * tf.reduce_mean(log_likelihood, axis=-1)

  def _function_space_points(self, inputs) -> tuple[tf.Tensor, tf.Tensor]:
    """(the step's points [B + E, d]: the batch, then the perturbed extra inputs; the [S, P]
    prior draws at its prior points). Every random draw of an f-SVGD step is made here."""
    settings = self.function_space
    extra = inputs[self.batch_size:]
    extra = extra + self.kde_std * self.prior_noise.normal(extra.shape)
    points = tf.concat([inputs[:self.batch_size], extra], axis=0)
    normals = []
    for layer in self.dense_layers:
      fan_in = int(layer.kernel.shape[1])
      normals.append(self.prior_noise.normal([settings.prior_draws, fan_in, layer.units]))
      normals.append(self.prior_noise.normal([settings.prior_draws, layer.units]))
    draws = prior_function_draws(self.dense_layers, tf.gather(points, self._prior_columns),
                                 normals)
    return points, draws

  @property
  def _prior_columns(self) -> list[int]:
    """The prior term's points: the first P // 2 of the batch, the last of the extra batch."""
    points = self.function_space.prior_points
    total = self.batch_size + self.function_space.extra_batch
    return list(range(points // 2)) + list(range(total - (points - points // 2), total))

  def _replica_terms(self, num_replicas, replica, inputs, labels, transform_seed):
    """(log-likelihood term, negative log prior) of every particle: the step's forward pass."""
    del num_replicas, replica, transform_seed
    noise_scale = self.noise_layer.noise_scale[:, 0]
    if self.function_space is None:
      values = self.model(inputs, training=True)[..., 0]
      return (self._log_likelihood(labels, values, noise_scale),
              -log_weight_prior(self.dense_layers) - log_noise_prior(noise_scale))
    points, draws = self._function_space_points(inputs)
    values = self.model(points, training=True)[..., 0]
    mean, precision = gaussian_from_draws(draws)
    log_prior = gaussian_log_density(tf.gather(values, self._prior_columns, axis=1), mean,
                                     precision)
    labels = labels[:self.batch_size]
    return (self._log_likelihood(labels, values[:, :self.batch_size], noise_scale),
            -log_prior - log_noise_prior(noise_scale))

  def _replica_step(self, indices, transform_seed, learning_rate):
    """One SVGD step of every particle; (log joint, negative log prior) per particle."""
    _, _, _, inputs, labels = self._replica_share(indices)
    if self.function_space is None:
      gradients, log_likelihood, negative_log_prior = self._weight_space_gradients(inputs, labels)
    else:
      gradients, log_likelihood, negative_log_prior = self._function_space_gradients(inputs,
                                                                                      labels)
    self.optimizer.apply(gradients, learning_rate)
    return log_likelihood - negative_log_prior, negative_log_prior

  def _weight_space_gradients(self, inputs, labels):
    """-phi over the flattened weights and noise scale of every particle."""
    with tf.GradientTape() as tape:
      log_likelihood, negative_log_prior = self._replica_terms(1, 0, inputs, labels, None)
      total_log_joint = tf.reduce_sum(log_likelihood - negative_log_prior)
    variables = self.variables_to_train
    scores = tape.gradient(total_log_joint, variables)
    num_particles = int(variables[0].shape[0])
    flat = tf.concat([tf.reshape(v, [num_particles, -1]) for v in variables], axis=1)
    flat_scores = tf.concat([tf.reshape(s, [num_particles, -1]) for s in scores], axis=1)
    direction = svgd_direction(flat, flat_scores)
    sizes = [int(np.prod(v.shape[1:])) for v in variables]
    gradients = [-tf.reshape(part, v.shape)
                 for part, v in zip(tf.split(direction, sizes, axis=1), variables)]
    return gradients, log_likelihood, negative_log_prior

  def _function_space_gradients(self, inputs, labels):
    """-phi back-propagated through every particle's function values (the weights), and the
    gradient of the negative log posterior of the noise scales (MAP)."""
    noise_variable = self.noise_layer.untransformed_noise_scale
    labels = labels[:self.batch_size]
    with tf.GradientTape(persistent=True) as tape:
      points, draws = self._function_space_points(inputs)
      values = self.model(points, training=True)[..., 0]
      noise_scale = self.noise_layer.noise_scale[:, 0]
      noise_loss = -tf.reduce_sum(self._log_likelihood(
          labels, tf.stop_gradient(values[:, :self.batch_size]), noise_scale)
                                  + log_noise_prior(noise_scale)) / self._num_examples_float
    fixed_values = tf.stop_gradient(values)
    fixed_scale = tf.stop_gradient(noise_scale)
    mean, precision = gaussian_from_draws(draws)
    with tf.GradientTape() as score_tape:
      score_tape.watch(fixed_values)
      log_likelihood = self._log_likelihood(labels, fixed_values[:, :self.batch_size],
                                            fixed_scale)
      log_prior = gaussian_log_density(tf.gather(fixed_values, self._prior_columns, axis=1),
                                       mean, precision)
      total_log_joint = tf.reduce_sum(log_likelihood + log_prior)
    scores = score_tape.gradient(total_log_joint, fixed_values)
    direction = svgd_direction(fixed_values, scores)
    num_points = float(fixed_values.shape[1])
    weights = [v for v in self.variables_to_train if v is not noise_variable]
    weight_gradients = tape.gradient(values, weights, output_gradients=-direction / num_points)
    noise_gradient = tape.gradient(noise_loss, noise_variable)
    del tape
    by_variable = {v.ref(): g for v, g in zip(weights, weight_gradients)}
    by_variable[noise_variable.ref()] = noise_gradient
    gradients = [by_variable[v.ref()] for v in self.variables_to_train]
    return gradients, log_likelihood, -log_prior - log_noise_prior(fixed_scale)


def train_particles(model: tf_keras.Sequential, inputs, labels, *, num_steps: int,
                    learning_rate: float | LearningRateSchedule = 4e-3, batch_size: int = 100,
                    seed: int = 0, function_space: Optional[FunctionSpaceSettings] = None,
                    checkpoint_dir: Optional[str] = None, summary_dir: Optional[str] = None,
                    steps_per_checkpoint: int = 5000) -> TrainingResult:
  """SVGD (or f-SVGD with `function_space`) of every particle of `model` for `num_steps` steps,
  checkpointed and resumable like every trainer (`baselines.training`)."""
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  maximizer = ParticleMaximizer(model, inputs, labels, batch_size=batch_size, data_seed=seed,
                                function_space=function_space)
  name = "svgd" if function_space is None else "fsvgd"
  training = CheckpointedTraining(maximizer, learning_rate,
                                  steps_per_checkpoint=steps_per_checkpoint, name=name,
                                  extra_state={"function_prior_noise": maximizer.prior_noise},
                                  objective_name="log joint")
  return training.train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir)
