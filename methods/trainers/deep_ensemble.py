"""Deep ensembles (Lakshminarayanan et al. 2017), all members in one vectorised loop.

Members are point-estimate networks stacked on a leading member axis: each has
its own initialisation and its own minibatch stream, and Adam is element-wise,
so training them together is exactly training them one by one. Regression
members predict a heteroscedastic Gaussian (mean, softplus variance + 1e-6) and
are trained on NLL(x) + NLL(x_adv), with x_adv the fast-gradient-sign
adversarial example at `epsilon` (inputs standardised). Predictions combine the
members as the exact mixture (log-mean-exp of member likelihoods).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.member_convolution import conv_arguments, member_conv2d
from auxiliary_sampling.noise import derived_seed
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.training_loop import InputTransform, TrainingLoop
from common.validation import check_integer
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.training import CheckpointedTraining, Penalty, TrainingResult

VARIANCE_FLOOR = 1e-6


def member_initializer(initializer, seed: int, member: int):
  """`initializer` seeded for member `member` of a run seeded `seed`."""
  return type(initializer).from_config({**initializer.get_config(),
                                        "seed": derived_seed(seed, member)})


def independent_member_initializer(initializer, seed: int, member_shape: list[int]):
  """An initializer of [M, *member_shape].

  It draws each member as a separate layer would, from its own seed.
  """
  def initialize(shape, dtype=None):
    member_initializers = [member_initializer(initializer, seed, m) for m in range(shape[0])]
    return tf.stack([draw(member_shape, dtype) for draw in member_initializers])
  return initialize


class MemberDense(tf_keras.layers.Layer):
  """A dense layer with an independent kernel and bias per member.

  [M?, batch, in] -> [M, batch, out].
  """

  def __init__(self, units: int, num_members: int, activation=None, kernel_initializer="he_normal",
               seed: Optional[int] = None, **kwargs):
    super().__init__(**kwargs)
    self.seed = np.random.randint(2**31 - 1) if seed is None else int(seed)
    self.units = check_integer("units", units)
    self.num_members = check_integer("num_members", num_members)
    self.activation = tf_keras.activations.get(activation)
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    input_dim = int(input_shape[-1])
    self.kernel = self.add_weight(
        name="kernel", shape=[self.num_members, input_dim, self.units],
        initializer=independent_member_initializer(self.kernel_initializer, self.seed,
                                                   [input_dim, self.units]))
    self.bias = self.add_weight(name="bias", shape=[self.num_members, self.units],
                                initializer="zeros")
    super().build(input_shape)

  @no_autograph
  def call(self, inputs):
    inputs = tf.convert_to_tensor(inputs, self.compute_dtype)
    if inputs.shape.rank == 2:
      inputs = tf.broadcast_to(inputs[tf.newaxis],
                               tf.concat([[self.num_members], tf.shape(inputs)], 0))
    elif inputs.shape.rank != 3:
      raise ValueError(
          f"{self.name}: expected [batch, in] or [members, batch, in] inputs, got {inputs.shape}")
    return self.activation(tf.matmul(inputs, self.kernel) + self.bias[:, tf.newaxis, :])


class MemberConv2D(tf_keras.layers.Layer):
  """A 2-D convolution (NHWC) with an independent kernel and bias per member.

  [M?, B, H, W, C] -> [M, B, H', W', F]; with `num_members=None` a plain
  convolution [B, H, W, C] -> [B, H', W', F] (the deterministic layers of a
  partly Bayesian network before refinement gives them a member axis).
  """

  def __init__(self, filters: int, kernel_size, num_members: Optional[int], strides=1,
               padding: str = "SAME",
               activation=None, kernel_initializer="he_normal", seed: Optional[int] = None,
               **kwargs):
    super().__init__(**kwargs)
    self.seed = np.random.randint(2**31 - 1) if seed is None else int(seed)
    self.filters, self.kernel_size, self.padding = conv_arguments(filters, kernel_size, padding)
    self.num_members = None if num_members is None else check_integer("num_members", num_members)
    self.strides = strides
    self.activation = tf_keras.activations.get(activation)
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    member_shape = list(self.kernel_size) + [int(input_shape[-1]), self.filters]
    if self.num_members is None:
      self.kernel = self.add_weight(
          name="kernel", shape=member_shape,
          initializer=member_initializer(self.kernel_initializer, self.seed, 0))
      self.bias = self.add_weight(name="bias", shape=[self.filters], initializer="zeros")
    else:
      self.kernel = self.add_weight(
          name="kernel", shape=[self.num_members] + member_shape,
          initializer=independent_member_initializer(self.kernel_initializer, self.seed,
                                                     member_shape))
      self.bias = self.add_weight(name="bias", shape=[self.num_members, self.filters],
                                  initializer="zeros")
    super().build(input_shape)

  @no_autograph
  def call(self, inputs):
    inputs = tf.convert_to_tensor(inputs, self.compute_dtype)
    if self.num_members is None:
      if inputs.shape.rank != 4:
        raise ValueError(f"{self.name}: expected [batch, H, W, C] inputs, got {inputs.shape}")
      outputs = tf.nn.conv2d(inputs, self.kernel, self.strides, self.padding)
      return self.activation(outputs + self.bias)
    if inputs.shape.rank == 4:
      inputs = tf.broadcast_to(inputs[tf.newaxis],
                               tf.concat([[self.num_members], tf.shape(inputs)], 0))
    elif inputs.shape.rank != 5:
      raise ValueError(
          f"{self.name}: expected [batch, H, W, C] or [members, batch, H, W, C] inputs, "
          f"got {inputs.shape}")
    outputs = member_conv2d(inputs, self.kernel, self.strides, self.padding)
    return self.activation(outputs + self.bias[:, None, None, None, :])


class HeteroscedasticGaussianHead(tf_keras.layers.Layer):
  """Maps [..., 2] raw outputs to (mean, standard deviation) with variance softplus(raw) + 1e-6."""

  @no_autograph
  def call(self, raw):
    variance = tf.nn.softplus(raw[..., 1:2]) + VARIANCE_FLOOR
    return tf.concat([raw[..., 0:1], tf.sqrt(variance)], axis=-1)


class FanSumNormal(tf_keras.initializers.Initializer):
  """Kernels drawn from N(0, 1 / (fan_in + fan_out + 1)): the f-POVI authors' initialisation of
  their UCI particles (thu-ml/fpovi `ffn/rf.py`, `init_bnn_weight`; untruncated, biases 0)."""

  def __init__(self, seed: Optional[int] = None):
    self.seed = seed

  def __call__(self, shape, dtype=None, **kwargs):
    if len(shape) != 2:
      raise ValueError(f"FanSumNormal draws dense kernels [fan_in, fan_out], not shape {shape}")
    fan_in, fan_out = int(shape[0]), int(shape[1])
    return tf_keras.initializers.RandomNormal(
        stddev=1.0 / np.sqrt(fan_in + fan_out + 1.0), seed=self.seed)(shape, dtype)

  def get_config(self) -> dict:
    return {"seed": self.seed}


def member_regression_layers(num_members: int, hidden_units: int, num_hidden_layers: int,
                             num_outputs: int, seed: int,
                             kernel_initializer=None) -> list[MemberDense]:
  """The UCI network's dense layers on a member axis: ReLU hidden layers (He-normal), then a
  Glorot-uniform output layer, or `kernel_initializer` on every layer; each layer's initial
  values from its own seed."""
  hidden_initializer = kernel_initializer or "he_normal"
  layers = [
      MemberDense(hidden_units, num_members, activation="relu",
                  kernel_initializer=hidden_initializer, seed=derived_seed(seed, layer))
      for layer in range(num_hidden_layers)
  ]
  return layers + [MemberDense(num_outputs, num_members,
                               kernel_initializer=kernel_initializer or "glorot_uniform",
                               seed=derived_seed(seed, num_hidden_layers))]


def regression_ensemble(num_members: int = 10, hidden_units: int = 50, num_hidden_layers: int = 1,
                        seed: int = 0) -> tf_keras.Model:
  """The paper's UCI network as an ensemble: ReLU hidden layers, heteroscedastic Gaussian output."""
  return tf_keras.Sequential(
      member_regression_layers(num_members, hidden_units, num_hidden_layers, 2, seed)
      + [HeteroscedasticGaussianHead()])


class AdversarialObjective(ElboObjective):
  """N * mean[log p(y | x) + log p(y | x_adv)] per member and `kl_fn` (no KL: zero, or a
  penalty): the ensemble objective, the ELBO objective with another likelihood term.

  x_adv = x + epsilon * sign(grad_x NLL(x)) (fast gradient sign, Goodfellow
  et al. 2015), computed per member on that member's own batch. With
  epsilon = 0 the objective is plain maximum likelihood.
  """

  def __init__(self, model: tf.Module, log_likelihood_fn: LogLikelihoodFn, kl_fn,
               epsilon: float = 0.01):
    super().__init__(model, log_likelihood_fn, kl_fn=kl_fn)
    if not epsilon >= 0:
      raise ValueError(f"epsilon={epsilon!r} must be >= 0")
    self.epsilon = float(epsilon)

  def expected_log_likelihood(self, inputs, labels, num_examples: tf.Tensor) -> tf.Tensor:
    if self.epsilon == 0:
      return super().expected_log_likelihood(inputs, labels, num_examples)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(inputs)
      clean = self.log_likelihood_fn(labels, self.model_outputs(inputs))
    adversarial_inputs = tf.stop_gradient(inputs -
                                          self.epsilon * tf.sign(tape.gradient(clean, inputs)))
    adversarial = self.log_likelihood_fn(labels, self.model_outputs(adversarial_inputs))
    return num_examples * tf.reduce_mean(clean + adversarial, axis=-1)


def train_deep_ensemble(model: tf_keras.Model, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
                        *, num_members: int, num_steps: int = 5000,
                        learning_rate: float | LearningRateSchedule = 1e-3,
                        batch_size: int = 256, epsilon: float = 0.01, seed: int = 0,
                        checkpoint_dir: Optional[str] = None, summary_dir: Optional[str] = None,
                        steps_per_checkpoint: int = 5000,
                        penalty: Optional[Penalty] = None,
                        input_transform: Optional[InputTransform] = None,
                        loop_settings: LoopSettings = LoopSettings()) -> TrainingResult:
  """Trains all members of `model` together, each on its own minibatches, `num_steps` steps each.

  `learning_rate` is a constant or a `LearningRateSchedule`. The trace holds
  each member's objective N * mean[log p(y|x) + log p(y|x_adv)], minus N times
  `penalty(model)` ([M]: an L2 on the members' weights) if given;
  `input_transform` augments every member's batches; `loop_settings` say how the loop runs (its
  `for_ensemble()`).
  """
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  zero_kl = tf.zeros([num_members])
  num_examples = float(inputs.shape[0])

  def kl_fn():
    return zero_kl if penalty is None else num_examples * penalty(model)
  loop = TrainingLoop(AdversarialObjective(model, log_likelihood_fn, kl_fn, epsilon),
                      GradientUpdate(Adam(model.trainable_variables)),
                      UniformBatches(inputs, labels, batch_size, members=num_members),
                      data_seed=seed, input_transform=input_transform,
                      loop_settings=loop_settings.for_ensemble())
  training = CheckpointedTraining(loop, learning_rate,
                                  steps_per_checkpoint=steps_per_checkpoint, name="deep_ensemble")
  return training.train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir)
