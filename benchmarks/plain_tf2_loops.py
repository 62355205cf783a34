"""The step-floor workloads written out by hand in plain TensorFlow: VI, MNF, a deep ensemble and
the mushroom bandit's mean-field update.

Each rewrite starts from the initial values of one of our models (so it
solves the same problem: `benchmarks.step_floor` checks the final objective)
and runs the step in a few dozen ops with its own Adam, in one compiled
while-loop over chunks of `CHUNK` steps:
  noise inside   every step draws its batch indices and `stateless_normal`s;
  noise outside  the indices and the noise of a whole chunk are drawn before
                 it, the noise as uniforms turned into normals by Box-Muller
                 (inside the step, or before the chunk when XLA compiles the
                 chunk: XLA's transcendentals are slow on this CPU).
They are what our library's loops are measured against; none of our layers,
maximizers or noise streams run inside them.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from benchmarks.step_floor_sizes import BANDIT_BATCH, BATCH, CHUNK, LEARNING_RATE

LOG_2PI = math.log(2.0 * math.pi)

# (batch indices, per-step noises as flat vectors) -> the objective per member ([] or [M]),
# at the whole-dataset scale; the loss is minus its sum over N.
Objective = Callable[[tf.Tensor, Sequence[tf.Tensor]], tf.Tensor]


class Workload(NamedTuple):
  """A rewritten step's objective, its own variables (copies of `sources`, our model's variables
  they start from, in the same order), the flat sizes of the normal vectors one step draws, one
  step's batch-index shape ([B], or [M, B] for member batches) and N."""
  objective: Objective
  variables: list[tf.Variable]
  sources: list[tf.Variable]
  noise_sizes: list[int]
  batch_shape: list[int]
  num_examples: int


class Loop(NamedTuple):
  """`run(num_steps) -> [num_steps, ...] objective trace`, and `tracing_count()`: how many times
  its functions have been traced so far (a timing that includes tracing is not a step time)."""
  run: Callable[[int], tf.Tensor]
  tracing_count: Callable[[], int]


def _box_muller(uniforms: tf.Tensor) -> tf.Tensor:
  """Normals from uniforms, pairing the first half of the last axis with the second."""
  first, second = tf.split(uniforms, 2, axis=-1)
  radius = tf.sqrt(-2.0 * tf.math.log1p(-first))
  angle = 2.0 * np.pi * second
  return tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], -1)


def _normal_log_prob(values, loc, variance):
  return -0.5 * (LOG_2PI + tf.math.log(variance)) - 0.5 * tf.square(values - loc) / variance


def _even(size: int) -> int:
  """Box-Muller makes normals in pairs: the noise of `size` values is drawn as size rounded up."""
  return size + size % 2


def compiled_loop(workload: Workload, seed: int, noise_outside: bool, xla: bool) -> Loop:
  """The loop of Adam on the workload's objective."""
  objective, variables, _, noise_sizes, batch_shape, num_examples = workload
  variables = list(variables)
  moments = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in variables]
  iterations = tf.Variable(0.0)
  batch_shape = list(batch_shape)
  drawn_sizes = [_even(size) for size in noise_sizes]
  objective_shape = batch_shape[:-1]   # [] or [M]

  def stream(number, counter):
    """The stateless seed of random stream `number` at `counter`."""
    return tf.stack([tf.constant(seed + number, tf.int64), counter])

  def step(indices, noises):
    with tf.GradientTape() as tape:
      per_member = objective(indices, noises)
      loss = -tf.reduce_sum(per_member) / num_examples
    gradients = tape.gradient(loss, variables)
    iterations.assign_add(1.0)
    # TensorFlow's fused Adam kernel, one op per variable (what Keras' Adam ran for years).
    for variable, gradient, (first, second) in zip(variables, gradients, moments):
      tf.raw_ops.ResourceApplyAdam(
          var=variable.handle, m=first.handle, v=second.handle,
          beta1_power=0.9**iterations, beta2_power=0.999**iterations,
          lr=tf.constant(LEARNING_RATE), beta1=tf.constant(0.9), beta2=tf.constant(0.999),
          epsilon=tf.constant(1e-7), grad=gradient)
    return per_member

  def chunk(counter, chunk_indices, chunk_noises):
    trace = tf.zeros([CHUNK, *objective_shape])
    for offset in tf.range(CHUNK):
      index = counter + tf.cast(offset, tf.int64)
      if noise_outside:
        indices = chunk_indices[offset]
        noises = [noise[offset] if xla else _box_muller(noise[offset])
                  for noise in chunk_noises]
      else:
        indices = tf.random.stateless_uniform(batch_shape, seed=stream(0, index),
                                              maxval=num_examples, dtype=tf.int32)
        noises = [tf.random.stateless_normal([size], seed=stream(1 + i, index))
                  for i, size in enumerate(noise_sizes)]
      noises = [noise[:size] for noise, size in zip(noises, noise_sizes)]
      trace = tf.tensor_scatter_nd_update(trace, [[offset]], step(indices, noises)[tf.newaxis])
    return trace

  compiled_chunk = tf.function(chunk, jit_compile=xla)

  def draw_chunk(number):
    """Chunk `number`'s indices and noises, [CHUNK, size] each (nothing when the steps draw
    their own): uniforms, or normals when XLA runs the chunk."""
    counter = tf.cast(number, tf.int64) * CHUNK
    if not noise_outside:
      return tf.zeros([CHUNK, *batch_shape], tf.int32), []
    chunk_indices = tf.random.stateless_uniform([CHUNK, *batch_shape], seed=stream(0, counter),
                                                maxval=num_examples, dtype=tf.int32)
    uniforms = [tf.random.stateless_uniform([CHUNK, size], seed=stream(1 + i, counter))
                for i, size in enumerate(drawn_sizes)]
    return chunk_indices, [_box_muller(u) if xla else u for u in uniforms]

  def no_draws():
    return (tf.zeros([CHUNK, *batch_shape], tf.int32),
            [tf.zeros([CHUNK, size]) for size in drawn_sizes] if noise_outside else [])

  @tf.function
  def run(num_steps):
    """The next chunk's numbers are drawn while this chunk runs (they share no variable, so
    TensorFlow overlaps them), and none past the last chunk, as our loop does."""
    num_chunks = num_steps // CHUNK
    chunks = tf.TensorArray(tf.float32, size=num_chunks)
    chunk_indices, chunk_noises = draw_chunk(0)
    for number in tf.range(num_chunks):
      counter = tf.cast(number, tf.int64) * CHUNK
      chunks = chunks.write(number, compiled_chunk(counter, chunk_indices, chunk_noises))
      chunk_indices, chunk_noises = tf.cond(number + 1 < num_chunks,
                                            lambda: draw_chunk(number + 1), no_draws)
    return chunks.concat()

  def run_steps(num_steps: int) -> tf.Tensor:
    return run(tf.constant(num_steps, tf.int32))   # a tensor: one trace for every step count
  return Loop(run_steps, lambda: (run.experimental_get_tracing_count()
                                  + compiled_chunk.experimental_get_tracing_count()))


def _copies(variables) -> list[tf.Variable]:
  return [tf.Variable(variable.read_value()) for variable in variables]


def vi_workload(model, inputs, labels, log_likelihood) -> Workload:
  """Mean-field VI of a ReLU MLP with N(0, 1) priors, local reparameterisation (paper Eq. 4),
  from the initial posterior of `model` (our `DenseReparameterization` layers)."""
  parameters = [(layer.kernel, layer.bias) for layer in model.layers]
  loc_sources = [p.posterior_loc for pair in parameters for p in pair]
  raw_sources = [p.untransformed_posterior_scale for pair in parameters for p in pair]
  locs, raws = _copies(loc_sources), _copies(raw_sources)
  inputs, labels = tf.constant(inputs), tf.constant(labels)
  num_examples = int(inputs.shape[0])

  def objective(indices, noises):
    batch_inputs, batch_labels = tf.gather(inputs, indices), tf.gather(labels, indices)
    scales = [tf.nn.softplus(raw) for raw in raws]
    hidden = batch_inputs
    for layer, noise in enumerate(noises):
      kernel, bias, kernel_scale, bias_scale = (locs[2 * layer], locs[2 * layer + 1],
                                                scales[2 * layer], scales[2 * layer + 1])
      mean = hidden @ kernel + bias
      variance = tf.square(hidden) @ tf.square(kernel_scale) + tf.square(bias_scale)
      hidden = mean + tf.sqrt(variance) * tf.reshape(noise, tf.shape(mean))
      if layer < len(noises) - 1:
        hidden = tf.nn.relu(hidden)
    kl = tf.add_n([tf.reduce_sum(0.5 * (tf.square(s) + tf.square(m)) - tf.math.log(s) - 0.5)
                   for s, m in zip(scales, locs)])
    return num_examples * tf.reduce_mean(log_likelihood(batch_labels, hidden)) - kl

  widths = [int(layer.kernel.posterior_loc.shape[-1]) for layer in model.layers]
  return Workload(objective, locs + raws, loc_sources + raw_sources,
                  [BATCH * width for width in widths], [BATCH], num_examples)


class _MNFParameters:
  """Copies of one of our MNF dense layers' variables, its flows' masks, and its noise sizes."""

  def __init__(self, layer, batch: int):
    self.sources = [layer.kernel_loc, layer.untransformed_kernel_scale, layer.bias_loc,
                    layer.untransformed_bias_scale, layer.z_loc, layer.untransformed_z_scale,
                    layer.reverse_projection, layer.reverse_mean_weights,
                    layer.reverse_log_precision_weights]
    self.sources += [v for weights in layer.flow_q.step_weights + layer.flow_r.step_weights
                     for v in weights]
    (self.kernel_loc, self.kernel_raw, self.bias_loc, self.bias_raw, self.z_loc, self.z_raw,
     self.projection, self.mean_weights, self.precision_weights) = _copies(self.sources[:9])
    self.flow_q = [(mask, _copies(weights))
                   for mask, weights in zip(layer.flow_q.masks, layer.flow_q.step_weights)]
    self.flow_r = [(mask, _copies(weights))
                   for mask, weights in zip(layer.flow_r.masks, layer.flow_r.step_weights)]
    self.activation = layer.activation
    inputs, units = layer.kernel_loc.shape
    # z per example and the output noise; z of the KL term and the reverse model's W c.
    self.forward_noise_sizes, self.kl_noise_sizes = [batch * inputs, batch * units], [inputs, units]

  @property
  def variables(self) -> list[tf.Variable]:
    flows = [v for _, weights in self.flow_q + self.flow_r for v in weights]
    return [self.kernel_loc, self.kernel_raw, self.bias_loc, self.bias_raw, self.z_loc,
            self.z_raw, self.projection, self.mean_weights, self.precision_weights] + flows


def _flow(steps, z):
  """A masked RealNVP flow (methods.trainers.coupling_flow.MaskedCouplingFlow's map): (f(z),
  log |det|)."""
  log_det = tf.zeros(tf.shape(z)[:-1])
  for mask, (hidden, hidden_bias, to_mean, mean_bias, to_gate, gate_bias) in steps:
    features = tf.tanh((mask * z) @ hidden + hidden_bias)
    gate_logits = features @ to_gate + gate_bias
    gate = tf.sigmoid(gate_logits)
    z = mask * z + (1.0 - mask) * (gate * z + (1.0 - gate) * (features @ to_mean + mean_bias))
    log_det += tf.reduce_sum((1.0 - mask) * tf.math.log_sigmoid(gate_logits), axis=-1)
  return z, log_det


def _mnf_layer(p: _MNFParameters, hidden, noises):
  """(the layer's outputs, its bound's KL term): MNF Eq. 12 with one z, as methods.trainers.mnf."""
  z_noise, output_noise, kl_z_noise, reverse_noise = noises
  kernel_scale, bias_scale = tf.nn.softplus(p.kernel_raw), tf.nn.softplus(p.bias_raw)
  z_scale = tf.nn.softplus(p.z_raw)

  def sample_z(noise):
    z_0 = p.z_loc + z_scale * noise
    log_q_0 = tf.reduce_sum(_normal_log_prob(z_0, p.z_loc, tf.square(z_scale)), axis=-1)
    z_t, log_det = _flow(p.flow_q, z_0)
    return z_t, log_q_0 - log_det

  z, _ = sample_z(tf.reshape(z_noise, tf.shape(hidden)))
  mean = (hidden * z) @ p.kernel_loc + p.bias_loc
  variance = tf.square(hidden) @ tf.square(kernel_scale) + tf.square(bias_scale)
  outputs = p.activation(mean + tf.sqrt(variance) * tf.reshape(output_noise, tf.shape(mean)))

  z_t, log_q = sample_z(kl_z_noise[tf.newaxis])   # [1, d] and [1]: the flows take matrices
  scaled_loc = p.kernel_loc * tf.transpose(z_t)
  kernel_variance, bias_variance = tf.square(kernel_scale), tf.square(bias_scale)
  weight_kl = (tf.reduce_sum(0.5 * (kernel_variance + tf.square(scaled_loc))
                             - 0.5 * tf.math.log(kernel_variance) - 0.5)
               + tf.reduce_sum(0.5 * (bias_variance + tf.square(p.bias_loc))
                               - 0.5 * tf.math.log(bias_variance) - 0.5))
  projection_mean = tf.linalg.matvec(scaled_loc, p.projection, transpose_a=True)
  projection_variance = tf.linalg.matvec(kernel_variance, tf.square(p.projection),
                                         transpose_a=True)
  summary = tf.reduce_mean(tf.tanh(projection_mean + tf.sqrt(projection_variance) *
                                   reverse_noise))
  z_reverse, reverse_log_det = _flow(p.flow_r, z_t)
  log_reverse = tf.reduce_sum(_normal_log_prob(
      z_reverse, p.mean_weights * summary,
      tf.exp(-p.precision_weights * summary))) + tf.reduce_sum(reverse_log_det)
  return outputs, weight_kl + tf.reduce_sum(log_q) - log_reverse


def mnf_workload(model, inputs, labels, log_likelihood) -> Workload:
  """MNF's bound (MNF Eq. 12, N(0, 1) priors) of a dense network, from the initial values of
  `model` (our `DenseMNF` layers)."""
  layers = [_MNFParameters(layer, BATCH) for layer in model.layers]
  inputs, labels = tf.constant(inputs), tf.constant(labels)
  num_examples = int(inputs.shape[0])

  def objective(indices, noises):
    """`noises`: every layer's forward-pass draws, then every layer's KL-term draws (the order
    our layers draw in)."""
    hidden, kl = tf.gather(inputs, indices), 0.0
    forward, kl_terms = noises[:2 * len(layers)], noises[2 * len(layers):]
    for number, layer in enumerate(layers):
      hidden, layer_kl = _mnf_layer(layer, hidden, forward[2 * number:2 * number + 2]
                                    + kl_terms[2 * number:2 * number + 2])
      kl += layer_kl
    log_likelihood_values = log_likelihood(tf.gather(labels, indices), hidden)
    return num_examples * tf.reduce_mean(log_likelihood_values) - kl

  return Workload(objective, [v for layer in layers for v in layer.variables],
                  [v for layer in layers for v in layer.sources],
                  [size for layer in layers for size in layer.forward_noise_sizes]
                  + [size for layer in layers for size in layer.kl_noise_sizes], [BATCH],
                  num_examples)


def ensemble_workload(model, inputs, labels, epsilon: float) -> Workload:
  """A deep ensemble of heteroscedastic ReLU MLPs on N * mean[log p(y|x) + log p(y|x_adv)]
  (fast gradient sign at `epsilon`), each member on its own batches, from the initial values
  of `model` (our `MemberDense` layers)."""
  dense = [layer for layer in model.layers if hasattr(layer, "kernel")]
  kernels = _copies(layer.kernel for layer in dense)
  biases = _copies(layer.bias for layer in dense)
  num_members = int(kernels[0].shape[0])
  inputs, labels = tf.constant(inputs), tf.constant(labels)
  num_examples = int(inputs.shape[0])

  def log_likelihood(batch_inputs, batch_labels):
    hidden = batch_inputs
    for number, (kernel, bias) in enumerate(zip(kernels, biases)):
      hidden = hidden @ kernel + bias[:, tf.newaxis]
      if number < len(kernels) - 1:
        hidden = tf.nn.relu(hidden)
    variance = tf.nn.softplus(hidden[..., 1]) + 1e-6
    return _normal_log_prob(batch_labels[..., 0], hidden[..., 0], variance)

  def objective(indices, noises):
    del noises
    batch_inputs, batch_labels = tf.gather(inputs, indices), tf.gather(labels, indices)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(batch_inputs)
      clean = log_likelihood(batch_inputs, batch_labels)
    adversarial_inputs = tf.stop_gradient(
        batch_inputs - epsilon * tf.sign(tape.gradient(clean, batch_inputs)))
    adversarial = log_likelihood(adversarial_inputs, batch_labels)
    return num_examples * tf.reduce_mean(clean + adversarial, axis=-1)

  return Workload(objective, kernels + biases, [layer.kernel for layer in dense]
                  + [layer.bias for layer in dense], [], [num_members, BATCH], num_examples)


def bandit_workload(model, inputs, labels) -> Workload:
  """The mushroom bandit's update (`bandits.agents`, vi_ts): mean-field VI of one ReLU reward
  network per member with N(0, 1) priors and local reparameterisation, member m on its own history
  (inputs [M, N, F + 1]: the context, then the action 0/1; labels [M, N, 1]: the rewards), one
  predicted reward per action of which the row's action is scored under a Gaussian of the model's
  fixed noise scale; from the initial posterior of `model` (a
  `bandits.reward_model.RewardModel`)."""
  dense = model.network_layers
  parameters = [(layer.kernel, layer.bias) for layer in dense]
  loc_sources = [p.posterior_loc for pair in parameters for p in pair]
  raw_sources = [p.untransformed_posterior_scale for pair in parameters for p in pair]
  locs, raws = _copies(loc_sources), _copies(raw_sources)
  noise_scale = tf.constant(model.noise.noise_scale)            # [M, 1], fixed
  inputs, rewards = tf.constant(inputs), tf.constant(labels)[..., 0]
  num_members, num_examples = (int(size) for size in inputs.shape[:2])
  batch = BANDIT_BATCH

  def objective(indices, noises):
    rows = tf.gather(inputs, indices, batch_dims=1)               # [M, B, F + 1]
    batch_rewards = tf.gather(rewards, indices, batch_dims=1)     # [M, B]
    scales = [tf.nn.softplus(raw) for raw in raws]
    hidden = rows[..., :-1]
    for layer, noise in enumerate(noises):
      kernel, bias, kernel_scale, bias_scale = (locs[2 * layer], locs[2 * layer + 1],
                                                scales[2 * layer], scales[2 * layer + 1])
      mean = hidden @ kernel + bias[:, tf.newaxis]
      variance = (tf.square(hidden) @ tf.square(kernel_scale)
                  + tf.square(bias_scale)[:, tf.newaxis])
      hidden = mean + tf.sqrt(variance) * tf.reshape(noise, tf.shape(mean))
      if layer < len(noises) - 1:
        hidden = tf.nn.relu(hidden)
    predicted = tf.where(rows[..., -1] > 0.5, hidden[..., 1], hidden[..., 0])
    log_likelihood = (-0.5 * LOG_2PI - tf.math.log(noise_scale)
                      - 0.5 * tf.square((batch_rewards - predicted) / noise_scale))
    kl = tf.add_n([tf.reduce_sum(0.5 * (tf.square(s) + tf.square(m)) - tf.math.log(s) - 0.5,
                                 axis=list(range(1, len(m.shape))))
                   for s, m in zip(scales, locs)])
    return num_examples * tf.reduce_mean(log_likelihood, axis=-1) - kl

  widths = [int(layer.kernel.posterior_loc.shape[-1]) for layer in dense]
  return Workload(objective, locs + raws, loc_sources + raw_sources,
                  [num_members * batch * width for width in widths], [num_members, batch],
                  num_examples)
