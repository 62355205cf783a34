"""Bayesian Keras layers over Gaussian mean-field parameters.

Dense layers use the local reparameterisation trick (Kingma et al. 2015),
convolutions use Flipout (Wen et al. 2018). Every layer accepts an optional
member axis: with `num_members=M` its parameters have a leading axis of size
M, inputs may be [batch, ...] (shared by all members) or [M, batch, ...], and
outputs are [M, batch, ...]. The layers expose their parameters and their KL
to the current (conditional) prior; refinement never needs to know the layer
type. Dense and convolution layers can also draw one weight sample per member
and batch instead (`auxiliary_sampling.weight_noise`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf
import tf_keras

from auxiliary_sampling.graph_loops import no_autograph
from auxiliary_sampling.linear_calls import LinearCall, record
from auxiliary_sampling.member_convolution import conv_arguments, member_conv2d, padding_argument
from auxiliary_sampling.noise import MemberNoise
from auxiliary_sampling.parameters import INITIAL_UNTRANSFORMED_POSTERIOR_SCALE, GaussianMeanField
from auxiliary_sampling.weight_noise import resolve_weight_noise
from common.validation import check_integer


def dimension(tensor: tf.Tensor, axis: int):
  """The size of `axis`: a Python int when the trace knows it (so that noise shapes built from it
  are static, as noise drawn ahead of a step needs), else a scalar tensor."""
  size = tensor.shape[axis]
  return int(size) if size is not None else tf.shape(tensor)[axis]


class MaxPool2D(tf_keras.layers.Layer):
  """2-D max-pooling of [..., H, W, C] inputs with any number of leading (member, batch) axes."""

  def __init__(self, pool_size: int = 2, strides: Optional[int] = None, padding: str = "VALID",
               **kwargs):
    super().__init__(**kwargs)
    self.pool_size, self.strides = pool_size, strides or pool_size
    self.padding = padding_argument(padding)

  @no_autograph
  def call(self, inputs):
    leading = tf.shape(inputs)[:-3]
    folded = tf.reshape(inputs, tf.concat([[-1], tf.shape(inputs)[-3:]], 0))
    pooled = tf.nn.max_pool2d(folded, self.pool_size, self.strides, self.padding)
    return tf.reshape(pooled, tf.concat([leading, tf.shape(pooled)[1:]], 0))


class FlattenImage(tf_keras.layers.Layer):
  """[..., H, W, C] -> [..., H * W * C], keeping any leading (member, batch) axes."""

  @no_autograph
  def call(self, inputs):
    height, width, channels = inputs.shape[-3:]
    return tf.reshape(inputs, tf.concat([tf.shape(inputs)[:-3], [height * width * channels]], 0))


class LayerChain(tf_keras.layers.Layer):
  """Applies layers in order, like `tf_keras.Sequential` but without its input conforming.

  A Sequential model built on [batch, ..., 1] inputs silently squeezes the
  trailing axis of later [members, batch, ..., 1] inputs (grey-scale images
  with a member axis); a chain passes inputs through unchanged.
  """

  def __init__(self, layers: Sequence[tf_keras.layers.Layer], **kwargs):
    super().__init__(**kwargs)
    self.chain = list(layers)

  @no_autograph
  def call(self, inputs, training=None):
    outputs = inputs
    for layer in self.chain:
      outputs = layer(outputs, training=training)
    return outputs


class MeanFieldLayer(tf_keras.layers.Layer):
  """Base class: owns Gaussian mean-field parameters and a per-member noise stream."""

  def __init__(self, num_members: Optional[int] = None, prior_scale: float = 1.0,
               trainable_prior_scale: bool = True,
               untransformed_scale_init: float = INITIAL_UNTRANSFORMED_POSTERIOR_SCALE, **kwargs):
    super().__init__(**kwargs)
    self.untransformed_scale_init = untransformed_scale_init
    self.num_members = None if num_members is None else check_integer("num_members", num_members)
    self.prior_scale = prior_scale
    self.trainable_prior_scale = trainable_prior_scale
    self._parameters: list[GaussianMeanField] = []

  def _add_mean_field(self, name: str, shape: Sequence[int], loc_initializer) -> GaussianMeanField:
    parameter = GaussianMeanField(shape, num_members=self.num_members, prior_scale=self.prior_scale,
                                  trainable_prior_scale=self.trainable_prior_scale,
                                  loc_initializer=loc_initializer,
                                  untransformed_scale_init=self.untransformed_scale_init,
                                  add_weight=self.add_weight, dtype=self.dtype, name=name)
    self._parameters.append(parameter)
    return parameter

  def _add_noise(self) -> MemberNoise:
    return MemberNoise(self.num_members, add_weight=self.add_weight, name="noise")

  @property
  def mean_field_parameters(self) -> list[GaussianMeanField]:
    return list(self._parameters)

  def kl_divergence(self) -> tf.Tensor:
    """Sum of the parameters' KL(q || p(. | a_1..k)), one value per member."""
    return tf.add_n([p.kl_divergence() for p in self._parameters])

  def _with_member_axis(self, inputs: tf.Tensor, event_rank: int) -> tf.Tensor:
    """Broadcasts [batch, ...] inputs to [M, batch, ...] for a member layer."""
    if self.num_members is None:
      return inputs
    if inputs.shape.rank == event_rank + 1:
      return tf.broadcast_to(inputs[tf.newaxis],
                             tf.concat([[self.num_members], tf.shape(inputs)], 0))
    if inputs.shape.rank == event_rank + 2:
      if inputs.shape[0] is not None and inputs.shape[0] != self.num_members:
        raise ValueError(f"{self.name}: input member axis has size {inputs.shape[0]}, "
                         f"the layer has {self.num_members} members")
      return inputs
    raise ValueError(f"{self.name}: expected inputs of rank {event_rank + 1} or {event_rank + 2} "
                     f"(with a member axis), got shape {inputs.shape}")

  def _weight_sample(self, parameter: GaussianMeanField) -> tf.Tensor:
    """One reparameterised draw of `parameter` per member ([M, ...]; no member axis if None)."""
    return parameter.sample(self.noise.normal(parameter.event_shape, self.compute_dtype))

  def _check_input_rank(self, inputs: tf.Tensor, event_rank: int) -> None:
    if self.num_members is None and inputs.shape.rank != event_rank + 1:
      raise ValueError(f"{self.name}: expected inputs of rank {event_rank + 1}, got shape "
                       f"{inputs.shape} (a member axis needs num_members)")


class DenseReparameterization(MeanFieldLayer):
  """Dense layer with Gaussian weights and the local reparameterisation trick."""

  def __init__(self, units: int, activation=None, num_members: Optional[int] = None,
               kernel_initializer="he_normal", use_bias: bool = True, **kwargs):
    super().__init__(num_members=num_members, **kwargs)
    self.use_bias = use_bias
    self.units = check_integer("units", units)
    self.activation = tf_keras.activations.get(activation)
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    input_dim = int(input_shape[-1])
    self.kernel = self._add_mean_field("kernel", [input_dim, self.units], self.kernel_initializer)
    self.bias = (self._add_mean_field("bias", [self.units], tf_keras.initializers.Zeros())
                 if self.use_bias else None)
    self.noise = self._add_noise()
    super().build(input_shape)

  def _member_matmul(self, inputs: tf.Tensor, kernels: tf.Tensor) -> tf.Tensor:
    """[M, batch, units] products of inputs with [M, in, units] kernels.

    The inputs are [batch, in] (shared) or [M, batch, in]. A (broadcasting) batched matmul: on
    CPU several times faster than the equivalent einsum.
    """
    return tf.matmul(inputs if inputs.shape.rank == 3 else inputs[tf.newaxis], kernels)

  @no_autograph
  def call(self, inputs, weight_noise: Optional[str] = None):
    """`weight_noise`: see `auxiliary_sampling.weight_noise` (None: the enclosing scope's)."""
    inputs = tf.convert_to_tensor(inputs, self.compute_dtype)
    self._check_input_rank(inputs, 1)
    if resolve_weight_noise(weight_noise) == "per_batch":
      return self.activation(self._call_with_weights(inputs))
    if self.num_members is None:
      mean = tf.matmul(inputs, self.kernel.posterior_loc)
      variance = tf.matmul(tf.square(inputs), self.kernel.posterior_variance)
    else:
      if inputs.shape.rank != 2:
        inputs = self._with_member_axis(
            inputs, 1)  # checks the member axis (shared inputs broadcast in the matmul)
      mean = self._member_matmul(inputs, self.kernel.posterior_loc)
      variance = self._member_matmul(tf.square(inputs), self.kernel.posterior_variance)
    if self.bias is not None:
      bias_axis = slice(None) if self.num_members is None else (slice(None), None)
      mean += self.bias.posterior_loc[bias_axis]
      variance += self.bias.posterior_variance[bias_axis]
    event_shape = tf.shape(mean)[0 if self.num_members is None else 1:]
    outputs = mean + tf.sqrt(variance) * self.noise.normal(event_shape, self.compute_dtype,
                                                           per_example=True)
    return self.activation(outputs)

  def _call_with_weights(self, inputs: tf.Tensor) -> tf.Tensor:
    """Pre-activations with one weight draw per member, shared by the batch (per_batch noise)."""
    kernel = self._weight_sample(self.kernel)
    if self.num_members is None:
      outputs = tf.matmul(inputs, kernel)
    else:
      if inputs.shape.rank != 2:
        inputs = self._with_member_axis(inputs, 1)
      outputs = self._member_matmul(inputs, kernel)
    if self.bias is not None:
      bias = self._weight_sample(self.bias)
      outputs += bias if self.num_members is None else bias[:, None]
    if self.num_members is None:
      record(LinearCall(self.kernel, self.bias, inputs, outputs))
    return outputs


class Conv2DFlipout(MeanFieldLayer):
  """2-D convolution with Gaussian kernels and Flipout perturbations (NHWC)."""

  def __init__(self, filters: int, kernel_size, strides=1, padding: str = "SAME", activation=None,
               num_members: Optional[int] = None, kernel_initializer="he_normal", **kwargs):
    super().__init__(num_members=num_members, **kwargs)
    self.filters, self.kernel_size, self.padding = conv_arguments(filters, kernel_size, padding)
    self.strides = strides
    self.activation = tf_keras.activations.get(activation)
    self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)

  def build(self, input_shape):
    channels = int(input_shape[-1])
    self.kernel = self._add_mean_field(
        "kernel", list(self.kernel_size) + [channels, self.filters], self.kernel_initializer)
    self.bias = self._add_mean_field("bias", [self.filters], tf_keras.initializers.Zeros())
    self.noise = self._add_noise()
    super().build(input_shape)

  def _convolve(self, inputs: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    if self.num_members is None:
      return tf.nn.conv2d(inputs, kernel, self.strides, self.padding)
    return member_conv2d(inputs, kernel, self.strides, self.padding)

  @no_autograph
  def call(self, inputs, weight_noise: Optional[str] = None):
    """`weight_noise`: see `auxiliary_sampling.weight_noise` (None: the enclosing scope's)."""
    inputs = tf.convert_to_tensor(inputs, self.compute_dtype)
    self._check_input_rank(inputs, 3)
    inputs = self._with_member_axis(inputs, 3)
    if resolve_weight_noise(weight_noise) == "per_batch":
      outputs = self._convolve(inputs, self._weight_sample(self.kernel))
      bias = self._weight_sample(self.bias)
      outputs += bias if self.num_members is None else bias[:, None, None, None]
      if self.num_members is None:
        record(LinearCall(self.kernel, self.bias, inputs, outputs, self.strides, self.padding))
      return self.activation(outputs)
    member_axis = 0 if self.num_members is None else 1
    batch = dimension(inputs, member_axis)
    kernel_noise = self.noise.normal(self.kernel.event_shape, self.compute_dtype)
    kernel_perturbation = self.kernel.posterior_scale * kernel_noise
    channels = inputs.shape[-1]
    sign_input = self.noise.sign(tf.stack([batch, 1, 1, channels]), self.compute_dtype,
                                 per_example=True)
    sign_output = self.noise.sign(tf.stack([batch, 1, 1, self.filters]), self.compute_dtype,
                                 per_example=True)
    outputs = (self._convolve(inputs, self.kernel.posterior_loc)
               + self._convolve(inputs * sign_input, kernel_perturbation) * sign_output)
    bias_noise = self.noise.normal(tf.stack([batch, self.filters]), self.compute_dtype,
                                   per_example=True)
    if self.num_members is None:
      bias = self.bias.posterior_loc + self.bias.posterior_scale * bias_noise
      outputs += bias[:, None, None, :]
    else:
      bias = self.bias.posterior_loc[:, None] + self.bias.posterior_scale[:, None] * bias_noise
      outputs += bias[:, :, None, None, :]
    return self.activation(outputs)


class GaussianSample(MeanFieldLayer):
  """A free Gaussian parameter: returns one posterior sample per input row.

  For models whose unknowns are the weights themselves (the toy example,
  a linear-regression coefficient vector): each row of the batch gets an
  independent reparameterised draw, so averaging over the batch is a Monte
  Carlo estimate of an expectation under q.
  """

  def __init__(self, event_shape: Sequence[int], num_members: Optional[int] = None,
               loc_initializer="zeros", **kwargs):
    super().__init__(num_members=num_members, **kwargs)
    self.sample_shape = tuple(int(d) for d in event_shape)
    self.loc_initializer = tf_keras.initializers.get(loc_initializer)

  def build(self, input_shape):
    self.weight = self._add_mean_field("weight", self.sample_shape, self.loc_initializer)
    self.noise = self._add_noise()
    super().build(input_shape)

  @no_autograph
  def call(self, inputs):
    """`inputs` only carries the batch size: [batch, ...] without a member axis."""
    batch = dimension(inputs, 0)
    noise = self.noise.normal(tf.concat([[batch], self.sample_shape], 0), self.compute_dtype,
                              per_example=True)
    loc, scale = self.weight.posterior_loc, self.weight.posterior_scale
    if self.num_members is not None:
      loc, scale = loc[:, None], scale[:, None]
    return loc + scale * noise
