"""The (conditional) ELBO, its estimates, and the compiled loop that maximises it.

Mean-field VI and each refinement step maximise the same objective,
E_q log p(y | x, w) - KL(q(w) || p(w | a_1..k)) (paper Eq. 4), over different
variables: VI over all trainable variables (including the empirical-Bayes prior
scales), refinement over the posterior parameters only. `ElboMaximizer` is that
one loop, compiled whole with `tf.function`, with an Adam whose state can be
reset (refinement resets it for every new auxiliary variable).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from auxiliary_sampling.parameters import GaussianMeanField

# log p(y | outputs): maps (labels [batch, ...], model outputs [M?, batch, ...])
# to per-example log-likelihoods [M?, batch].
LogLikelihoodFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def mean_field_parameters(model: tf.Module) -> list[GaussianMeanField]:
  """All Gaussian mean-field parameters of a model, in a fixed (construction) order."""
  found, seen = [], set()
  for layer in layers_of(model):
    for parameter in getattr(layer, "mean_field_parameters", []):
      if id(parameter) not in seen:
        seen.add(id(parameter))
        found.append(parameter)
  return found


def layers_of(model) -> list:
  if isinstance(model, tf_keras.layers.Layer):
    return [model] + list(model._flatten_layers(include_self=False, recursive=True))
  return list(model.submodules)


WEIGHT_NOISE = ("per_example", "per_batch")


def check_weight_noise(mode: str) -> str:
  """`mode` if it is one of WEIGHT_NOISE (see `auxiliary_sampling.layers`), else ValueError."""
  if mode not in WEIGHT_NOISE:
    raise ValueError(f"unknown weight_noise {mode!r}; allowed: {', '.join(WEIGHT_NOISE)}")
  return mode


@contextlib.contextmanager
def weight_noise_mode(model: tf.Module, mode: str) -> Iterator[None]:
  """Within the context, the model's mean-field layers draw weight noise `mode`-wise.

  per_example: independent noise per example (local reparameterisation, Flipout);
  per_batch: one weight draw per member, shared by the batch. Layers read the
  mode when called, so a `tf.function` traced inside the context keeps it for
  all its later calls, and one traced outside keeps per_example.
  """
  check_weight_noise(mode)
  noisy_layers = [layer for layer in layers_of(model) if hasattr(layer, "weight_noise")]
  previous = [layer.weight_noise for layer in noisy_layers]
  try:
    for layer in noisy_layers:
      layer.weight_noise = mode
    yield
  finally:
    for layer, old_mode in zip(noisy_layers, previous):
      layer.weight_noise = old_mode


def model_kl(model: tf.Module) -> tf.Tensor:
  """KL(q(w) || p(w | a_1..k)) of the whole model, one value per member."""
  parameters = mean_field_parameters(model)
  if not parameters:
    raise ValueError(f"model {getattr(model, 'name', model)!r} has no Gaussian mean-field parameters")
  return tf.add_n([p.kl_divergence() for p in parameters])


def num_members_of(model: tf.Module) -> Optional[int]:
  """The model's member-axis size (None without one); all parameters must agree."""
  sizes = {p.num_members for p in mean_field_parameters(model)}
  if len(sizes) != 1:
    raise ValueError(f"model mixes member-axis sizes {sorted(sizes, key=str)}")
  return sizes.pop()


def check_data(inputs, labels) -> tuple[tf.Tensor, tf.Tensor]:
  """Converts training data to tensors and checks that inputs and labels pair up."""
  inputs, labels = tf.convert_to_tensor(inputs), tf.convert_to_tensor(labels)
  if inputs.shape.rank == 0 or labels.shape.rank == 0 or inputs.shape[0] != labels.shape[0]:
    raise ValueError(f"inputs have {inputs.shape[0] if inputs.shape.rank else 'no'} examples but labels "
                     f"have {labels.shape[0] if labels.shape.rank else 'no'}")
  if inputs.shape[0] == 0:
    raise ValueError("the training data is empty")
  return inputs, labels


class Adam(tf.Module):
  """Adam (Kingma & Ba 2015) with resettable state, usable inside compiled loops.

  Element-wise, so M members stacked on a leading axis are optimised exactly as
  M separate runs would be.
  """

  def __init__(self, variables: Sequence[tf.Variable], beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-7):
    super().__init__(name="adam")
    self.variables_to_train = list(variables)
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.first_moments = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables_to_train]
    self.second_moments = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables_to_train]
    self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False)

  def reset(self) -> None:
    """Forgets the moment estimates (a fresh optimiser)."""
    for slot in self.first_moments + self.second_moments:
      slot.assign(tf.zeros_like(slot))
    self.iterations.assign(0)

  def apply(self, gradients: Sequence[tf.Tensor], learning_rate: tf.Tensor) -> None:
    """One Adam step, one fused kernel per variable (few ops: this loop is op-bound on CPU)."""
    step = tf.cast(self.iterations.assign_add(1), tf.float32)
    beta_1_power, beta_2_power = tf.pow(self.beta_1, step), tf.pow(self.beta_2, step)
    for variable, gradient, m, v in zip(self.variables_to_train, gradients, self.first_moments,
                                        self.second_moments):
      tf.raw_ops.ResourceApplyAdam(
          var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta_1_power, beta2_power=beta_2_power,
          lr=learning_rate, beta1=tf.constant(self.beta_1), beta2=tf.constant(self.beta_2),
          epsilon=tf.constant(self.epsilon), grad=gradient)


class ElboMaximizer(tf.Module):
  """Maximises the (conditional) ELBO of `model` on in-memory data by minibatch Adam.

  Batches are drawn with replacement from a counter-based stream seeded by
  `data_seed`: one batch shared by all members, or with `member_batches=M`
  an independent batch per member (inputs [M, batch, ...], as deep-ensemble
  members need). `run` executes many steps in one compiled while-loop and
  returns the per-step, per-member ELBO estimate at the whole-dataset scale,
  N * mean_batch log p - KL - `elbo_offset`, and the KL. `kl_fn` replaces
  the Gaussian mean-field KL (MNF's bound term; zero for point estimates).
  Subclasses may override `elbo_on_batch` (adversarial training does).
  `weight_noise` (one of WEIGHT_NOISE, see `weight_noise_mode`) is how the
  model's layers draw noise inside this loop only: the loop is traced in it.
  """

  def __init__(self, model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
               variables: Sequence[tf.Variable], batch_size: int, data_seed: int = 0,
               kl_fn: Optional[Callable[[], tf.Tensor]] = None, member_batches: Optional[int] = None,
               weight_noise: str = "per_example"):
    super().__init__(name="elbo_maximizer")
    self.weight_noise = check_weight_noise(weight_noise)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
      raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
    if member_batches is not None and (isinstance(member_batches, bool) or not isinstance(member_batches, int)
                                       or member_batches < 1):
      raise ValueError(f"member_batches={member_batches!r} must be None or an integer >= 1")
    self.model = model
    self.kl_fn = kl_fn or (lambda: model_kl(model))
    self.member_batches = member_batches
    self.inputs, self.labels = check_data(inputs, labels)
    self.num_examples = int(self.inputs.shape[0])
    self.log_likelihood_fn = log_likelihood_fn
    self.variables_to_train = list(variables)
    if not self.variables_to_train:
      raise ValueError("no variables to train")
    self.batch_size = batch_size
    self.data_seed = int(data_seed)
    self.optimizer = Adam(self.variables_to_train)
    self.batch_counter = tf.Variable(0, dtype=tf.int64, trainable=False)

  def _batch(self):
    count = self.batch_counter.assign_add(1)
    shape = [self.batch_size] if self.member_batches is None else [self.member_batches, self.batch_size]
    indices = tf.random.stateless_uniform(shape, seed=tf.stack([tf.constant(self.data_seed, tf.int64), count]),
                                          maxval=self.num_examples, dtype=tf.int64)
    return tf.gather(self.inputs, indices), tf.gather(self.labels, indices)

  def expected_log_likelihood_on_batch(self, inputs, labels) -> tf.Tensor:
    """N * mean_batch log p(y | x, w), one value per member."""
    log_likelihood = self.log_likelihood_fn(labels, self.model(inputs, training=True))
    return self.num_examples * tf.reduce_mean(log_likelihood, axis=-1)

  def elbo_on_batch(self, inputs, labels) -> tf.Tensor:
    """N * mean_batch log p(y | x, w) - KL, one value per member."""
    return self.expected_log_likelihood_on_batch(inputs, labels) - self.kl_fn()

  @tf.function
  def run(self, num_steps, learning_rate, elbo_offset):
    """`num_steps` Adam steps; returns the [num_steps, M?] traces of ELBO estimates and KLs."""
    with weight_noise_mode(self.model, self.weight_noise):   # runs at trace time: the graph keeps the mode
      return self._run(num_steps, learning_rate, elbo_offset)

  def _run(self, num_steps, learning_rate, elbo_offset):
    learning_rate = tf.cast(learning_rate, tf.float32)
    elbo_trace = tf.TensorArray(tf.float32, size=num_steps)
    kl_trace = tf.TensorArray(tf.float32, size=num_steps)
    for step in tf.range(num_steps):
      inputs, labels = self._batch()
      with tf.GradientTape() as tape:
        kl = self.kl_fn()
        elbo = self.expected_log_likelihood_on_batch(inputs, labels) - kl
        # Members are independent, so the sum's gradient is each member's own.
        loss = -tf.reduce_sum(elbo) / self.num_examples
      gradients = tape.gradient(loss, self.variables_to_train)
      self.optimizer.apply(gradients, learning_rate)
      elbo_trace = elbo_trace.write(step, elbo - elbo_offset)
      kl_trace = kl_trace.write(step, tf.broadcast_to(kl, tf.shape(elbo)))
    return elbo_trace.stack(), kl_trace.stack()

  def maximize(self, num_steps: int, learning_rate: float, elbo_offset=0.0,
               reset_optimizer: bool = False, return_kl: bool = False):
    """Runs the compiled loop; raises FloatingPointError if the ELBO stops being finite.

    Returns the ELBO trace, or (ELBO trace, KL trace) with `return_kl`.
    """
    if reset_optimizer:
      self.optimizer.reset()
    trace, kl_trace = self.run(tf.constant(num_steps, tf.int32), tf.constant(learning_rate, tf.float32),
                               tf.convert_to_tensor(elbo_offset, tf.float32))
    trace = trace.numpy()
    if not np.all(np.isfinite(trace)):
      first = int(np.argmax(~np.isfinite(trace).reshape(len(trace), -1).all(axis=1)))
      raise FloatingPointError(f"non-finite ELBO at step {first + 1} of {num_steps} "
                               f"(learning rate {learning_rate:g})")
    return (trace, kl_trace.numpy()) if return_kl else trace


def estimate_elbo(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
                  batch_size: int = 1024, num_samples: int = 1) -> np.ndarray:
  """Whole-dataset ELBO, sum_n E_q log p(y_n | x_n, w) - KL, one value per member.

  The expected log-likelihood of every example is estimated with `num_samples`
  independent posterior draws (local reparameterisation draws per example),
  in one compiled loop over samples and batches.
  """
  if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
    raise ValueError(f"num_samples={num_samples!r} must be an integer >= 1")
  inputs, labels = check_data(inputs, labels)
  summed = _summed_log_likelihood(model, inputs, labels, log_likelihood_fn, batch_size, num_samples)
  expected_log_likelihood = summed.numpy() / num_samples
  return expected_log_likelihood - model_kl(model).numpy().astype(np.float64)


@tf.function(reduce_retracing=True)
def _summed_log_likelihood(model, inputs, labels, log_likelihood_fn, batch_size, num_samples):
  num_examples = tf.shape(inputs)[0]
  num_batches = (num_examples + batch_size - 1) // batch_size
  total = tf.zeros_like(model_kl(model), dtype=tf.float64)
  for index in tf.range(num_samples * num_batches):
    start = (index % num_batches) * batch_size
    batch_labels = labels[start:start + batch_size]
    log_likelihood = log_likelihood_fn(batch_labels, model(inputs[start:start + batch_size], training=True))
    total += tf.reduce_sum(tf.cast(log_likelihood, tf.float64), axis=-1)
  return total
