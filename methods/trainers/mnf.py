"""Multiplicative normalizing flows (Louizos & Welling 2017), dense and 2-D convolution layers.

The weights are Gaussian given a multiplicative noise vector z,
q(W | z) = N(z * mu, sigma^2), with z on the input units of a dense layer and
on the output channels of a convolution. q(z) is a Gaussian pushed through a
masked RealNVP flow. The KL term of the bound (MNF Eq. 12) is estimated with
one sample of z:

  KL ~ KL(q(W | z_T) || p(W)) + log q(z_T) - log r(z_T | W),

with the auxiliary reverse model r(z_T | W): a second flow maps z_T to z',
and r(z' | W) = N(b1 * mean(tanh(W c)), exp(-b2 * mean(tanh(W c)))), W c
sampled by the local reparameterisation of q(W | z_T). Prior N(0, 1) on every
weight and bias. Forward passes draw z per example and use the local
reparameterisation trick (convolutions: on the output pre-activations). The flows are
masked RealNVP couplings (`methods.trainers.coupling_flow`).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.conditionals import normal_kl, normal_log_prob
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.member_convolution import conv_arguments
from auxiliary_sampling.model_parameters import layers_of
from auxiliary_sampling.noise import MemberNoise
from auxiliary_sampling.parameters import inverse_softplus
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.training_loop import TrainingLoop
from common.validation import check_integer
from methods.trainers.coupling_flow import MaskedCouplingFlow
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.training import CheckpointedTraining, TrainingResult


INITIAL_WEIGHT_SCALE = math.exp(-4.5)    # log-variance -9, as MNF initialises it
INITIAL_Z_VARIANCE = 0.1


class _MNFLayer(tf_keras.layers.Layer):
  """Shared parameters of an MNF layer.

  Weights given z, q(z) and its flow, r(z | W) and its flow.
  """

  z_axis: int  # the kernel axis z multiplies

  def __init__(self, num_flows_q: int = 2, num_flows_r: int = 2, hidden_units_q: int = 50,
               hidden_units_r: int = 100, prior_variance: float = 1.0, use_flows: bool = True,
               seed: Optional[int] = None, kernel_initializer="he_normal", **kwargs):
    super().__init__(**kwargs)
    if num_flows_q < 0 or num_flows_r < 0:
      raise ValueError(f"num_flows_q={num_flows_q}, num_flows_r={num_flows_r} must be >= 0")
    self.num_flows_q = num_flows_q if use_flows else 0
    self.num_flows_r = num_flows_r if use_flows else 0
    self.hidden_units_q, self.hidden_units_r = hidden_units_q, hidden_units_r
    self.prior_variance = float(prior_variance)
    self.use_flows = use_flows
    self.seed = np.random.randint(2**31 - 1) if seed is None else int(seed)
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)

  def _build_parameters(self, kernel_shape: list[int], bias_units: int) -> None:
    z_dimension = kernel_shape[self.z_axis]
    rng = np.random.default_rng(self.seed)
    self.z_dimension = z_dimension
    self.kernel_loc = self.add_weight(name="kernel_loc", shape=kernel_shape,
                                      initializer=self.kernel_initializer)
    self.untransformed_kernel_scale = self.add_weight(
        name="untransformed_kernel_scale", shape=kernel_shape,
        initializer=tf_keras.initializers.Constant(inverse_softplus(INITIAL_WEIGHT_SCALE)))
    self.bias_loc = self.add_weight(name="bias_loc", shape=[bias_units], initializer="zeros")
    self.untransformed_bias_scale = self.add_weight(
        name="untransformed_bias_scale", shape=[bias_units],
        initializer=tf_keras.initializers.Constant(inverse_softplus(INITIAL_WEIGHT_SCALE)))
    self.z_loc = self.add_weight(
        name="z_loc", shape=[z_dimension],
        initializer=tf_keras.initializers.RandomNormal(1.0, 0.01, seed=self.seed))
    self.untransformed_z_scale = self.add_weight(
        name="untransformed_z_scale", shape=[z_dimension],
        initializer=tf_keras.initializers.Constant(inverse_softplus(math.sqrt(INITIAL_Z_VARIANCE))))
    normal_one = tf_keras.initializers.RandomNormal(1.0, 0.01, seed=self.seed + 1)
    self.reverse_projection = self.add_weight(name="reverse_projection", shape=[z_dimension],
                                              initializer=normal_one)
    self.reverse_mean_weights = self.add_weight(name="reverse_mean_weights", shape=[z_dimension],
                                                initializer=normal_one)
    self.reverse_log_precision_weights = self.add_weight(name="reverse_log_precision_weights",
                                                         shape=[z_dimension],
                                                         initializer=normal_one)
    self.flow_q = MaskedCouplingFlow(z_dimension, self.num_flows_q, self.hidden_units_q, rng,
                                     name="flow_q")
    self.flow_r = MaskedCouplingFlow(z_dimension, self.num_flows_r, self.hidden_units_r, rng,
                                     name="flow_r")
    # Counter-based draws, checkpointed with the layer; per-example rows split over replicas.
    self.noise = MemberNoise(None, add_weight=self.add_weight, name="noise",
                             initial_seed=self.seed)

  @property
  def kernel_scale(self) -> tf.Tensor:
    return tf.nn.softplus(self.untransformed_kernel_scale)

  @property
  def bias_scale(self) -> tf.Tensor:
    return tf.nn.softplus(self.untransformed_bias_scale)

  @property
  def z_scale(self) -> tf.Tensor:
    return tf.nn.softplus(self.untransformed_z_scale)

  def normal(self, shape, per_example: bool = False) -> tf.Tensor:
    """N(0, 1) draws from the layer's stream (`per_example`: `shape` starts with the batch)."""
    return self.noise.normal(shape, self.dtype, per_example=per_example)

  def sample_z(self, sample_shape) -> tuple[tf.Tensor, tf.Tensor]:
    """z_T ~ q(z) with log q(z_T), for [*sample_shape, z_dimension] draws (per example if any)."""
    sample_shape = tf.cast(sample_shape, tf.int32)
    noise = self.normal(tf.concat([sample_shape, [self.z_dimension]], 0),
                        per_example=sample_shape.shape[0] != 0)
    z_0 = self.z_loc + self.z_scale * noise
    log_q_0 = tf.reduce_sum(normal_log_prob(z_0, self.z_loc, tf.square(self.z_scale)), axis=-1)
    z_t, log_det = self.flow_q.forward(z_0)
    return z_t, log_q_0 - log_det

  def _kernel_as_matrix(self, kernel: tf.Tensor) -> tf.Tensor:
    """The kernel as [other units, z_dimension]."""
    kernel = tf.experimental.numpy.moveaxis(kernel, self.z_axis, -1)
    return tf.reshape(kernel, [-1, self.z_dimension])

  def _scaled_kernel_loc(self, z: tf.Tensor) -> tf.Tensor:
    shape = [1] * len(self.kernel_loc.shape)
    shape[self.z_axis] = self.z_dimension
    return self.kernel_loc * tf.reshape(z, shape)

  def log_reverse(self, z_t: tf.Tensor) -> tf.Tensor:
    """log r(z_T | W) with W ~ q(W | z_T) drawn by local reparameterisation of W c."""
    kernel_loc = self._kernel_as_matrix(self._scaled_kernel_loc(z_t))
    kernel_variance = self._kernel_as_matrix(tf.square(self.kernel_scale))
    projection_mean = tf.linalg.matvec(kernel_loc, self.reverse_projection)
    projection_variance = tf.linalg.matvec(kernel_variance, tf.square(self.reverse_projection))
    activation = tf.tanh(projection_mean +
                         tf.sqrt(projection_variance) * self.normal(tf.shape(projection_mean)))
    summary = tf.reduce_mean(activation)
    mean = self.reverse_mean_weights * summary
    log_precision = self.reverse_log_precision_weights * summary
    z_reverse, log_det = self.flow_r.forward(z_t)
    return tf.reduce_sum(normal_log_prob(z_reverse, mean, tf.exp(-log_precision))) + log_det

  def weight_kl(self, z: tf.Tensor) -> tf.Tensor:
    """KL(q(W | z) || p(W)) summed over the kernel and the bias (the first term of MNF Eq. 12)."""
    kernel_kl = normal_kl(self._scaled_kernel_loc(z), tf.square(self.kernel_scale), 0.0,
                          self.prior_variance)
    bias_kl = normal_kl(self.bias_loc, tf.square(self.bias_scale), 0.0, self.prior_variance)
    return tf.reduce_sum(kernel_kl) + tf.reduce_sum(bias_kl)

  def kl_divergence(self) -> tf.Tensor:
    """One-sample estimate of the bound's KL term (MNF Eq. 12).

    An upper bound on KL(q(W) || p(W)).
    """
    z_t, log_q = self.sample_z(tf.zeros([0], tf.int32))
    return self.weight_kl(z_t) + log_q - self.log_reverse(z_t)


class DenseMNF(_MNFLayer):
  """Dense MNF layer: z multiplies the input units; per-example z and local reparameterisation."""

  z_axis = 0

  def __init__(self, units: int, activation=None, **kwargs):
    super().__init__(**kwargs)
    self.units = check_integer("units", units)
    self.activation = tf_keras.activations.get(activation)

  def build(self, input_shape):
    self._build_parameters([int(input_shape[-1]), self.units], self.units)
    super().build(input_shape)

  @no_autograph
  def call(self, inputs):
    inputs = tf.convert_to_tensor(inputs, self.dtype)
    if inputs.shape.rank != 2:
      raise ValueError(f"{self.name}: expected [batch, units] inputs, got shape {inputs.shape}")
    z, _ = self.sample_z(tf.shape(inputs)[:1])
    mean = tf.matmul(inputs * z, self.kernel_loc) + self.bias_loc
    variance = tf.matmul(tf.square(inputs), tf.square(self.kernel_scale)) + tf.square(
        self.bias_scale)
    return self.activation(mean + tf.sqrt(variance) * self.normal(tf.shape(mean), per_example=True))


class Conv2DMNF(_MNFLayer):
  """2-D convolution MNF layer (NHWC).

  z multiplies the output channels; local reparameterisation.
  """

  z_axis = 3

  def __init__(self, filters: int, kernel_size, strides=1, padding: str = "SAME", activation=None,
               **kwargs):
    super().__init__(**kwargs)
    self.filters, self.kernel_size, self.padding = conv_arguments(filters, kernel_size, padding)
    self.strides = strides
    self.activation = tf_keras.activations.get(activation)

  def build(self, input_shape):
    self._build_parameters(
        list(self.kernel_size) + [int(input_shape[-1]), self.filters], self.filters)
    super().build(input_shape)

  @no_autograph
  def call(self, inputs):
    inputs = tf.convert_to_tensor(inputs, self.dtype)
    if inputs.shape.rank != 4:
      raise ValueError(
          f"{self.name}: expected [batch, height, width, channels] inputs, got {inputs.shape}")
    z, _ = self.sample_z(tf.shape(inputs)[:1])
    mean = tf.nn.conv2d(inputs, self.kernel_loc, self.strides, self.padding) * z[:, None, None, :]
    variance = tf.nn.conv2d(tf.square(inputs), tf.square(self.kernel_scale), self.strides,
                            self.padding)
    mean += self.bias_loc
    variance += tf.square(self.bias_scale)
    return self.activation(mean + tf.sqrt(variance) * self.normal(tf.shape(mean), per_example=True))


def mnf_layers(model) -> list[_MNFLayer]:
  return [layer for layer in layers_of(model) if isinstance(layer, _MNFLayer)]


def mnf_kl(model) -> tf.Tensor:
  """The bound's KL term summed over the model's MNF layers."""
  layers = mnf_layers(model)
  if not layers:
    raise ValueError(f"model {getattr(model, 'name', model)!r} has no MNF layers")
  return tf.add_n([layer.kl_divergence() for layer in layers])


def regression_mnf(hidden_units: int = 50, seed: int = 0, **layer_kwargs) -> tf_keras.Sequential:
  """The paper's UCI network with MNF layers; outputs the predictive mean [batch, 1]."""
  return tf_keras.Sequential([
      DenseMNF(hidden_units, activation="relu", seed=seed, **layer_kwargs),
      DenseMNF(1, seed=seed + 1, kernel_initializer="glorot_uniform", **layer_kwargs)
  ])


def train_mnf(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
              num_steps: int = 30_000, learning_rate: float | LearningRateSchedule = 1e-3,
              batch_size: int = 256,
              seed: int = 0, checkpoint_dir: Optional[str] = None,
              summary_dir: Optional[str] = None,
              steps_per_checkpoint: int = 5000,
              loop_settings: LoopSettings = LoopSettings()) -> TrainingResult:
  """Maximises the MNF lower bound (KL divided by N) with Adam.

  30,000 steps by default (paper Sec. 4.1).
  """
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  loop = TrainingLoop(ElboObjective(model, log_likelihood_fn, kl_fn=lambda: mnf_kl(model)),
                      GradientUpdate(Adam(model.trainable_variables)),
                      UniformBatches(inputs, labels, batch_size), data_seed=seed,
                      loop_settings=loop_settings)
  training = CheckpointedTraining(loop, learning_rate,
                                  steps_per_checkpoint=steps_per_checkpoint, name="mnf")
  return training.train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir)
