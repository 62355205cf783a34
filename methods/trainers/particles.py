"""Particle posteriors: weight-space SVGD and function-space SVGD (f-SVGD).

Stein variational gradient descent (Liu & Wang 2016) moves n particles along
phi(x_i) = 1/n sum_j [k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i)], an attraction to
high posterior density plus a repulsion between particles, with an RBF kernel whose bandwidth
is set by the median heuristic. Weight-space SVGD applies it to the networks' weights; in an
over-parameterised network distant weights can be the same function, and the particles collapse
to one function (Wang, Ren, Zhu and Zhang 2019, "Function space particle optimization for
Bayesian neural networks", ICLR, Section 2). f-SVGD applies it to the particles' function
values on a minibatch (their Eq. 4), the function-space prior approximated by a Gaussian
moment-matched to prior network draws (their Section 3.2), and moves each network's weights by
back-propagating phi as the error signal of its outputs (their Eq. 3 and Remark 3.1).

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
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.noise import MemberNoise, derived_seed
from auxiliary_sampling.predictive import gaussian_log_likelihood
from auxiliary_sampling.training_batches import GroupedBatches, UniformBatches
from auxiliary_sampling.training_data import check_data
from auxiliary_sampling.training_loop import ReplicaBatch, TrainingLoop
from methods.trainers.trainer_options import PARTICLE_INITIALIZERS
from methods.trainers.deep_ensemble import FanSumNormal, MemberDense, member_regression_layers
from methods.trainers.gaussian_head import HomoscedasticNoise
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.training import CheckpointedTraining, TrainingResult

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
  """h of the kernel exp(-d^2 / (2 h)) by the median heuristic, median(d^2) / (2 log(n + 1)), for
  [..., n, n] squared distances (one h per leading index): the median over all n^2 pairs, the
  diagonal included (as Liu & Wang's code takes it)."""
  num_particles = int(squared_distances.shape[-1])
  flat = tf.reshape(squared_distances, tf.concat([tf.shape(squared_distances)[:-2], [-1]], 0))
  values = tf.sort(flat, axis=-1)
  count = num_particles * num_particles
  median = 0.5 * (values[..., (count - 1) // 2] + values[..., count // 2])
  return tf.maximum(median / (2.0 * math.log(num_particles + 1.0)), BANDWIDTH_FLOOR)


def svgd_direction(particles: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
  """phi at every particle (Liu & Wang 2016, Eq. 8) for [..., n, D] particles and their
  log-density gradients, each leading index a separate set: (K scores + sum_j K_ij (x_i - x_j) /
  h) / n with the RBF kernel K."""
  centred = particles - tf.reduce_mean(particles, axis=-2, keepdims=True)
  norms = tf.reduce_sum(tf.square(centred), axis=-1)
  squared = tf.maximum(norms[..., :, tf.newaxis] + norms[..., tf.newaxis, :]
                       - 2.0 * tf.matmul(centred, centred, transpose_b=True), 0.0)
  bandwidth = tf.stop_gradient(median_bandwidth(squared))[..., tf.newaxis, tf.newaxis]
  kernel = tf.exp(-squared / (2.0 * bandwidth))
  attraction = tf.matmul(kernel, scores)
  repulsion = (centred * tf.reduce_sum(kernel, axis=-1, keepdims=True)
               - tf.matmul(kernel, centred)) / bandwidth
  return (attraction + repulsion) / float(particles.shape[-2])


def prior_scale(layer: MemberDense, fixed_scale: Optional[float] = None) -> float:
  """Standard deviation of the prior on a layer's kernel and bias: N(0, 1/fan_out) (the f-POVI
  authors'), or `fixed_scale` on every weight when given."""
  return fixed_scale if fixed_scale is not None else 1.0 / math.sqrt(layer.units)


def log_weight_prior(layers: list[MemberDense], fixed_scale: Optional[float] = None) -> tf.Tensor:
  """[n] log N(w; 0, prior_scale^2) summed over every particle's kernels and biases."""
  total = 0.0
  for layer in layers:
    scale = prior_scale(layer, fixed_scale)
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


@dataclasses.dataclass(frozen=True)
class ParticleNetwork:
  """What f-SVGD needs to know of a particle model besides calling it: its dense layers (whose
  prior networks it draws), its noise layer, and how the layers' outputs become the function
  value at an input (a network of one output: the output; a bandit's one-output-per-action
  network: the output of the input's action)."""

  dense_layers: list[MemberDense]
  noise_layer: HomoscedasticNoise
  network_inputs: Callable[[tf.Tensor], tf.Tensor] = lambda inputs: inputs
  function_value: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] = (
      lambda outputs, inputs: outputs[..., 0])
  # The weights' prior std: None for N(0, 1/fan_out), or one std for every weight.
  weight_prior_scale: Optional[float] = None

  @classmethod
  def of_sequential(cls, model: tf_keras.Sequential) -> "ParticleNetwork":
    """A Sequential of MemberDense layers ending in one HomoscedasticNoise layer."""
    dense = [layer for layer in model.layers if isinstance(layer, MemberDense)]
    noise = [layer for layer in model.layers if isinstance(layer, HomoscedasticNoise)]
    if not dense or len(noise) != 1:
      raise ValueError("particles need MemberDense layers and one HomoscedasticNoise layer")
    return cls(dense, noise[0])


def prior_function_draws(network: ParticleNetwork, points: tf.Tensor,
                         normals: list[tf.Tensor]) -> tf.Tensor:
  """[G, S, P] function values at `points` [G, P, d] of S networks per group drawn from the
  weight prior. `normals` holds standard normals per layer, kernel then bias ([G, S, in, out],
  [G, S, out])."""
  hidden = network.network_inputs(points)[:, tf.newaxis]
  for index, layer in enumerate(network.dense_layers):
    scale = prior_scale(layer, network.weight_prior_scale)
    kernel, bias = scale * normals[2 * index], scale * normals[2 * index + 1]
    hidden = layer.activation(tf.matmul(hidden, kernel) + bias[:, :, tf.newaxis, :])
  return network.function_value(hidden, points[:, tf.newaxis])


def gaussian_from_draws(draws: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """(mean [..., P], precision [..., P, P]) in float64 of the Gaussian matching [..., S, P]
  draws' first two moments (unbiased covariance, eigenvalues floored at
  PRIOR_EIGENVALUE_FLOOR)."""
  draws = tf.cast(draws, tf.float64)
  mean = tf.reduce_mean(draws, axis=-2)
  centred = draws - mean[..., tf.newaxis, :]
  covariance = tf.matmul(centred, centred, transpose_a=True) / float(draws.shape[-2] - 1)
  eigenvalues, eigenvectors = tf.linalg.eigh(covariance)
  inverse = 1.0 / tf.maximum(eigenvalues, PRIOR_EIGENVALUE_FLOOR)
  precision = tf.matmul(eigenvectors * inverse[..., tf.newaxis, :], eigenvectors,
                        transpose_b=True)
  return mean, precision


def gaussian_log_density(values: tf.Tensor, mean: tf.Tensor, precision: tf.Tensor) -> tf.Tensor:
  """[..., n] -1/2 (v - mean)^T precision (v - mean) of [..., n, P] values (the constant
  dropped), the mean [..., P] and precision [..., P, P] per leading index."""
  centred = tf.cast(values, tf.float64) - mean[..., tf.newaxis, :]
  quadratic = tf.reduce_sum(tf.matmul(centred, precision) * centred, axis=-1)
  return tf.cast(-0.5 * quadratic, values.dtype)


def regression_particles(num_particles: int, hidden_units: int, num_hidden_layers: int = 1,
                         initial_noise_scale: float = 1.0, seed: int = 0,
                         initializer: str = "he_glorot") -> tf_keras.Sequential:
  """n particles of the UCI network: ReLU hidden layers, one output, a noise scale each, with
  initial weights by `initializer` (one of PARTICLE_INITIALIZERS)."""
  if initializer not in PARTICLE_INITIALIZERS:
    raise ValueError(f"initializer={initializer!r}; allowed: {', '.join(PARTICLE_INITIALIZERS)}")
  kernel_initializer = FanSumNormal() if initializer == "fpovi" else None
  return tf_keras.Sequential(
      member_regression_layers(num_particles, hidden_units, num_hidden_layers, 1, seed,
                               kernel_initializer)
      + [HomoscedasticNoise(num_members=num_particles, initial_scale=initial_noise_scale)])


class ParticleObjective(tf.Module):
  """Each particle's log joint on a step's batch and its SVGD direction (weight space, or
  function space with `function_space` settings).

  `terms` are the log-likelihood term, N * mean log p(y | x), and the negative log prior (the
  weights' and noise's; f-SVGD's: the Gaussian function-space prior at its points); the trace
  holds their difference, the log joint. With `GroupedBatches` (a bandit's per-seed histories)
  the M particles form G independent sets of M / G, set g on group g's data, each set with its
  own batch, kernel and prior draws; otherwise one set on one dataset. The batches hold
  `batch_size` likelihood rows, then f-SVGD's extra rows.
  """

  def __init__(self, model: tf.Module, batches: UniformBatches | GroupedBatches, *,
               batch_size: int, data_seed: int = 0,
               function_space: Optional[FunctionSpaceSettings] = None,
               network: Optional[ParticleNetwork] = None):
    super().__init__(name="particle_objective")
    self.model = model
    self.network = network or ParticleNetwork.of_sequential(model)
    self.function_space = function_space
    self.batch_size = batch_size
    self.variables_to_train = list(model.trainable_variables)
    num_particles = int(self.network.noise_layer.untransformed_noise_scale.shape[0])
    self.grouped = isinstance(batches, GroupedBatches)
    if not self.grouped and batches.members is not None:
      raise ValueError("the particles of one set share each batch: build UniformBatches "
                       "without members")
    self.num_groups = batches.num_groups if self.grouped else 1
    if num_particles % self.num_groups or num_particles // self.num_groups < 2:
      raise ValueError(f"{num_particles} particles do not form {self.num_groups} sets of at "
                       "least 2; allowed: a multiple of the groups, at least twice as many")
    self.particles_per_group = num_particles // self.num_groups
    rows = batch_size + (0 if function_space is None else function_space.extra_batch)
    if batches.batch_size != rows:
      raise ValueError(f"the batches hold {batches.batch_size} rows; allowed: {rows}, the "
                       "likelihood batch and f-SVGD's extra batch")
    # f-SVGD's perturbations and prior networks (a stream of its own, checkpointed with the run).
    self.prior_noise = MemberNoise(None, name="function_prior_noise",
                                   initial_seed=derived_seed(data_seed, _PRIOR_STREAM))
    self.input_size = int(np.prod(batches.inputs.shape[2 if self.grouped else 1:]))

  def _by_group(self, values: tf.Tensor) -> tf.Tensor:
    """[M, ...] -> [G, M / G, ...]."""
    return tf.reshape(values, [self.num_groups, self.particles_per_group, *values.shape[1:]])

  def _group_rows(self, rows: tf.Tensor) -> tf.Tensor:
    """One copy per group of rows the particles of a group share: [M, R, ...] with groups,
    [R, ...] without -> [G, R, ...]."""
    if not self.grouped:
      return rows[tf.newaxis]
    return rows[::self.particles_per_group]

  def _log_likelihood(self, labels, values, scale, num_examples: tf.Tensor) -> tf.Tensor:
    """[n] N * mean over the batch of log N(y | values, scale^2)."""
    log_likelihood = gaussian_log_likelihood(labels[..., 0], values, scale[:, tf.newaxis])
    return num_examples * tf.reduce_mean(log_likelihood, axis=-1)

  def _function_space_points(self, inputs, num_examples: tf.Tensor
                             ) -> tuple[tf.Tensor, tf.Tensor]:
    """(the step's points [M?, B + E, d]: the batch, then the extra inputs perturbed by the
    KDE's noise, std kde_scale / sqrt(N d); the [G, S, P] prior draws at the prior points).
    Every random draw of an f-SVGD step is made here."""
    settings = self.function_space
    extra = self._group_rows(inputs[..., self.batch_size:, :])
    kde_std = settings.kde_scale / tf.sqrt(num_examples * self.input_size)
    extra = extra + kde_std * self.prior_noise.normal(extra.shape)
    if not self.grouped:
      extra = extra[0]
    else:
      extra = tf.repeat(extra, self.particles_per_group, axis=0)
    points = tf.concat([inputs[..., :self.batch_size, :], extra], axis=-2)
    normals = []
    for layer in self.network.dense_layers:
      fan_in = int(layer.kernel.shape[1])
      shape = [self.num_groups, settings.prior_draws]
      normals.append(self.prior_noise.normal([*shape, fan_in, layer.units]))
      normals.append(self.prior_noise.normal([*shape, layer.units]))
    prior_points = tf.gather(self._group_rows(points), self._prior_columns, axis=1)
    return points, prior_function_draws(self.network, prior_points, normals)

  @property
  def _prior_columns(self) -> list[int]:
    """The prior term's points: the first P // 2 of the batch, the last of the extra batch."""
    points = self.function_space.prior_points
    total = self.batch_size + self.function_space.extra_batch
    return list(range(points // 2)) + list(range(total - (points - points // 2), total))

  def _function_log_prior(self, values: tf.Tensor, draws: tf.Tensor) -> tf.Tensor:
    """[M] log density of the moment-matched Gaussian prior at the prior points' values."""
    mean, precision = gaussian_from_draws(draws)
    at_points = self._by_group(tf.gather(values, self._prior_columns, axis=1))
    return tf.reshape(gaussian_log_density(at_points, mean, precision), [-1])

  def terms(self, batch: ReplicaBatch) -> tuple[tf.Tensor, tf.Tensor]:
    """(log-likelihood term, negative log prior) of every particle: the step's forward pass."""
    noise_scale = self.network.noise_layer.noise_scale[:, 0]
    labels = batch.labels[..., :self.batch_size, :]
    if self.function_space is None:
      values = self.model(batch.inputs, training=True)[..., 0]
      return (self._log_likelihood(labels, values, noise_scale, batch.num_examples),
              -log_weight_prior(self.network.dense_layers, self.network.weight_prior_scale)
              - log_noise_prior(noise_scale))
    points, draws = self._function_space_points(batch.inputs, batch.num_examples)
    values = self.model(points, training=True)[..., 0]
    return (self._log_likelihood(labels, values[:, :self.batch_size], noise_scale,
                                 batch.num_examples),
            -self._function_log_prior(values, draws) - log_noise_prior(noise_scale))

  def stein_gradients(self, batch: ReplicaBatch) -> tuple[list[tf.Tensor], tf.Tensor, tf.Tensor]:
    """(-phi as a gradient per variable, log-likelihood term, negative log prior) of every
    particle: SVGD's direction in weight space, or f-SVGD's in function space."""
    if self.function_space is None:
      return self._weight_space_gradients(batch)
    return self._function_space_gradients(batch)

  def _weight_space_gradients(self, batch: ReplicaBatch):
    """-phi over the flattened weights and noise scale of every particle."""
    with tf.GradientTape() as tape:
      log_likelihood, negative_log_prior = self.terms(batch)
      total_log_joint = tf.reduce_sum(log_likelihood - negative_log_prior)
    variables = self.variables_to_train
    scores = tape.gradient(total_log_joint, variables)
    num_particles = int(variables[0].shape[0])
    flat = tf.concat([tf.reshape(v, [num_particles, -1]) for v in variables], axis=1)
    flat_scores = tf.concat([tf.reshape(s, [num_particles, -1]) for s in scores], axis=1)
    direction = tf.reshape(svgd_direction(self._by_group(flat), self._by_group(flat_scores)),
                           [num_particles, -1])
    sizes = [int(np.prod(v.shape[1:])) for v in variables]
    gradients = [-tf.reshape(part, v.shape)
                 for part, v in zip(tf.split(direction, sizes, axis=1), variables)]
    return gradients, log_likelihood, negative_log_prior

  def _function_space_gradients(self, batch: ReplicaBatch):
    """-phi back-propagated through every particle's function values (the weights), and the
    gradient of the negative log posterior of the noise scales (MAP)."""
    noise_variable = self.network.noise_layer.untransformed_noise_scale
    labels = batch.labels[..., :self.batch_size, :]
    num_examples = batch.num_examples
    with tf.GradientTape(persistent=True) as tape:
      points, draws = self._function_space_points(batch.inputs, num_examples)
      values = self.model(points, training=True)[..., 0]
      noise_scale = self.network.noise_layer.noise_scale[:, 0]
      noise_loss = -tf.reduce_sum(self._log_likelihood(
          labels, tf.stop_gradient(values[:, :self.batch_size]), noise_scale, num_examples)
                                  + log_noise_prior(noise_scale)) / num_examples
    fixed_values = tf.stop_gradient(values)
    fixed_scale = tf.stop_gradient(noise_scale)
    with tf.GradientTape() as score_tape:
      score_tape.watch(fixed_values)
      log_likelihood = self._log_likelihood(labels, fixed_values[:, :self.batch_size],
                                            fixed_scale, num_examples)
      log_prior = self._function_log_prior(fixed_values, draws)
      total_log_joint = tf.reduce_sum(log_likelihood + log_prior)
    scores = score_tape.gradient(total_log_joint, fixed_values)
    direction = tf.reshape(
        svgd_direction(self._by_group(fixed_values), self._by_group(scores)),
        tf.shape(fixed_values))
    num_points = float(fixed_values.shape[1])
    weights = [v for v in self.variables_to_train if v is not noise_variable]
    weight_gradients = tape.gradient(values, weights, output_gradients=-direction / num_points)
    noise_gradient = tape.gradient(noise_loss, noise_variable)
    del tape
    by_variable = {v.ref(): g for v, g in zip(weights, weight_gradients)}
    by_variable[noise_variable.ref()] = noise_gradient
    gradients = [by_variable[v.ref()] for v in self.variables_to_train]
    return gradients, log_likelihood, -log_prior - log_noise_prior(fixed_scale)


class SteinUpdate(tf.Module):
  """A step of `optimizer` (Adam) along the objective's SVGD direction, -phi taken as the
  gradient (the authors' use of Adam); records each particle's log joint and negative log prior.
  The particles share one device: the kernel needs every particle."""

  def __init__(self, optimizer: tf.Module):
    super().__init__(name="stein_update")
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync > 1:
      raise ValueError("particle methods run on one device (the kernel couples every "
                       f"particle), but the strategy has {strategy.num_replicas_in_sync} "
                       "replicas; allowed: one replica")
    self.optimizer = optimizer

  def reset(self) -> None:
    self.optimizer.reset()

  def step(self, objective: ParticleObjective, batch: ReplicaBatch, learning_rate: tf.Tensor
           ) -> tuple[tf.Tensor, tf.Tensor]:
    gradients, log_likelihood, negative_log_prior = objective.stein_gradients(batch)
    self.optimizer.apply(gradients, learning_rate)
    return log_likelihood - negative_log_prior, negative_log_prior


def particle_batch_rows(batch_size: int, function_space: Optional[FunctionSpaceSettings]) -> int:
  """Rows of a particle step's batch: the likelihood batch, then f-SVGD's extra batch."""
  return batch_size + (0 if function_space is None else function_space.extra_batch)


def particle_loop(model: tf.Module, batches: UniformBatches | GroupedBatches, *, batch_size: int,
                  data_seed: int = 0, function_space: Optional[FunctionSpaceSettings] = None,
                  network: Optional[ParticleNetwork] = None,
                  loop_settings: LoopSettings = LoopSettings()) -> TrainingLoop:
  """SVGD (f-SVGD with `function_space`) of the particles of `model` with Adam, on `batches` of
  `particle_batch_rows(batch_size, function_space)` rows."""
  objective = ParticleObjective(model, batches, batch_size=batch_size, data_seed=data_seed,
                                function_space=function_space, network=network)
  return TrainingLoop(objective, SteinUpdate(Adam(objective.variables_to_train)), batches,
                      data_seed=data_seed, loop_settings=loop_settings)


def train_particles(model: tf_keras.Sequential, inputs, labels, *, num_steps: int,
                    learning_rate: float | LearningRateSchedule = 4e-3, batch_size: int = 100,
                    seed: int = 0, function_space: Optional[FunctionSpaceSettings] = None,
                    checkpoint_dir: Optional[str] = None, summary_dir: Optional[str] = None,
                    steps_per_checkpoint: int = 5000,
                    weight_prior_scale: Optional[float] = None,
                    loop_settings: LoopSettings = LoopSettings()) -> TrainingResult:
  """SVGD (or f-SVGD with `function_space`) of every particle of `model` for `num_steps` steps,
  checkpointed and resumable like every trainer (`methods.trainers.training`). `weight_prior_scale`:
  one prior std for every weight (None: the f-POVI paper's N(0, 1/fan_out))."""
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  network = dataclasses.replace(ParticleNetwork.of_sequential(model),
                                weight_prior_scale=weight_prior_scale)
  batches = UniformBatches(inputs, labels, particle_batch_rows(batch_size, function_space))
  loop = particle_loop(model, batches, batch_size=batch_size, data_seed=seed,
                       function_space=function_space, network=network,
                       loop_settings=loop_settings)
  name = "svgd" if function_space is None else "fsvgd"
  training = CheckpointedTraining(loop, learning_rate,
                                  steps_per_checkpoint=steps_per_checkpoint, name=name,
                                  extra_state={"function_prior_noise": loop.objective.prior_noise},
                                  objective_name="log joint")
  return training.train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir)
