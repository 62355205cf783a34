"""Variational Online Gauss-Newton (Khan et al. 2018; Osawa et al. 2019, Algorithm 1).

VOGN fits the same Gaussian mean-field posterior as `methods.trainers.vi`, q(w) =
N(mu, sigma^2), with the prior N(0, 1/delta) the model's mean-field layers
hold, but by a natural-gradient update instead of Adam on (mu, softplus^-1
sigma). Algorithm 1's prior is fixed; with `prior="empirical_bayes"` each
weight tensor's prior variance v moves after every step towards the KL's
minimiser mean(mu^2 + sigma^2) over that tensor (type-II maximum likelihood in
closed form, where VI follows the gradient of the same scale), so delta varies:
v <- prior_decay v + (1 - prior_decay) mean(mu^2 + sigma^2). Jumping to the
minimiser at every step (decay 0) collapses: a tensor initialised at zero (a
bias) has v ~ sigma^2, a prior precision that pins its mean at zero for good
(energy's test MLL fell by 1.2 on 5 of 5 seeds, naval's refinement went
non-finite; results/related/ablations/vogn_empirical_bayes/). For the tempered objective
E_q[log p(D | w)] - tau * KL(q || p), with delta~ = tau * delta / N, each step:

  w ~ q (per_batch weight noise; `mc_samples` draws, averaged),
  g = mean_i g_i(w),  h = mean_i c_i(w)    (per-example gradients of -log p(y_i | x_i, w)),
  m <- beta_1 m + (1 - beta_1) (g + delta~ mu)                       (momentum on the mean)
  s <- beta_2 s + (1 - beta_2) h                                     (curvature estimate)
  mu <- mu - alpha m / (s + delta~ + gamma)                          (gamma: external damping)
  sigma^2 = tau / (N (s + delta~))       i.e. precision N s / tau + delta.

c_i is the per-example curvature: `squared_gradients`, g_i * g_i, is the
blog's Algorithm 1 (its "Gauss-Newton" term, an empirical Fisher);
`gauss_newton` is the generalised Gauss-Newton diagonal, sum_k d2l_i/df_ik^2
(df_ik/dw)^2 over the network outputs f_i (exact Gauss-Newton for a Gaussian
likelihood; with it the fixed point of Bayesian linear regression is the exact
mean-field optimum, tested). Per-example gradients come in closed form from
each dense or convolution layer's inputs and pre-activation gradients
(`auxiliary_sampling.linear_calls`): one backward pass, no loop. s starts
from the curvature of the first minibatch (an extra pass, as Algorithm 1
initialises it). Point-estimated variables outside the mean-field layers (a
regression noise scale) follow Adam on the same minibatch objective. The
posterior scales the layers hold are set from s after every step, so the model
is an ordinary mean-field model throughout: evaluation, the ELBO and `refine()`
use it unchanged.
"""
from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.batch_shards import batch_shard
from auxiliary_sampling.elbo_maximizer import ElboMaximizer
from auxiliary_sampling.graph_loops import graph_function
from auxiliary_sampling.linear_calls import (LinearCall, calls_producing, gauss_newton_mean,
                                             mean_and_mean_square, record_linear_calls)
from auxiliary_sampling.model_parameters import mean_field_parameters
from auxiliary_sampling.parameters import softplus_inverse
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.training import CheckpointedTraining
from methods.trainers.vogn_settings import VognSettings

class VognState(tf.Module):
  """Momentum m and curvature s per mean-field parameter, Adam for the other trainables."""

  def __init__(self, locs: list[tf.Variable], others: list[tf.Variable]):
    super().__init__(name="vogn")
    self.momenta = [tf.Variable(tf.zeros_like(v), trainable=False) for v in locs]
    self.curvatures = [tf.Variable(tf.zeros_like(v), trainable=False) for v in locs]
    self.curvature_initialised = tf.Variable(False, trainable=False)
    self.adam = Adam(others) if others else None


class VognMaximizer(ElboMaximizer):
  """`ElboMaximizer`'s compiled loop and data stream with VOGN's step in place of Adam's.

  The trace is the usual minibatch ELBO estimate (N * mean log p - KL), whatever tau is.
  """

  def __init__(self, model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
               settings: VognSettings, batch_size: int, data_seed: int = 0):
    inputs, labels = check_data(inputs, labels)
    model(inputs[:1])
    self.parameters = mean_field_parameters(model)
    if not self.parameters:
      raise ValueError("VOGN needs a model with Gaussian mean-field parameters")
    if any(p.num_members is not None for p in self.parameters):
      raise ValueError("VOGN trains one posterior: build the model without a member axis")
    if any(p.untransformed_prior_scale.trainable for p in self.parameters):
      raise ValueError("VOGN sets its prior itself (fixed or by closed-form empirical Bayes): "
                       "build the model with trainable_prior_scale=False")
    locs = [p.posterior_loc for p in self.parameters]
    mean_field_ids = {id(v) for p in self.parameters for v in p.state_variables}
    others = [v for v in model.trainable_variables if id(v) not in mean_field_ids]
    super().__init__(model, inputs, labels, log_likelihood_fn, locs + others,
                     batch_size=batch_size, data_seed=data_seed, weight_noise="per_batch")
    self.settings = settings
    self.locs, self.others = locs, others
    self.optimizer = VognState(locs, others)

  def batch_terms(self, inputs, labels) -> tuple[list, list, list, tf.Tensor]:
    """At one weight draw: the batch means of the per-example gradients g_i of -log p w.r.t.
    each mean and of their curvature terms c_i, the gradients of the other trainables of the
    mean -log p, and the mean log p.

    Per-example gradients come in closed form from the layers' inputs and the gradients at
    their pre-activations (`auxiliary_sampling.linear_calls`), one backward pass for all.
    """
    gauss_newton = self.settings.curvature == "gauss_newton"
    with tf.GradientTape(persistent=True) as tape:
      with record_linear_calls() as calls:
        outputs = self.model_outputs(inputs)
      with tf.GradientTape() as output_tape:
        output_tape.watch(outputs)
        log_likelihood = self.log_likelihood_fn(labels, outputs)
        total = tf.reduce_sum(log_likelihood)
      loss = -total
      if gauss_newton:
        # Recorded on `tape`: each output column and the log-likelihood's gradient there, whose
        # derivative w.r.t. the outputs is the output Hessian, row i that of example i.
        batch = tf.shape(outputs)[0]
        flat_outputs = tf.reshape(outputs, [batch, -1])
        flat_gradients = tf.reshape(output_tape.gradient(total, outputs), [batch, -1])
        columns = [(flat_outputs[:, k], flat_gradients[:, k])
                   for k in range(int(flat_outputs.shape[-1]))]
    calls = self._check_calls(calls_producing(calls, outputs))
    pre_activations = [call.pre_activations for call in calls]
    deltas = tape.gradient(loss, pre_activations)
    means, curvatures = [], []
    for call, delta in zip(calls, deltas):
      call_means, call_squares = mean_and_mean_square(call, delta)
      means += call_means
      curvatures += call_squares
    if gauss_newton:
      output_deltas, output_curvatures = [], []
      for output, output_gradient in columns:
        hessian_rows = tf.reshape(tape.gradient(output_gradient, outputs), [batch, -1])
        output_curvatures.append(-hessian_rows[:, len(output_curvatures)])
        output_deltas.append(tape.gradient(output, pre_activations,
                                           unconnected_gradients=tf.UnconnectedGradients.ZERO))
      curvatures = []
      for index, call in enumerate(calls):
        curvatures += gauss_newton_mean(call, [d[index] for d in output_deltas],
                                        output_curvatures)
    batch_size = tf.cast(tf.shape(log_likelihood)[0], total.dtype)
    other_gradients = ([g / batch_size for g in tape.gradient(loss, self.others)]
                       if self.others else [])
    mean_log_likelihood = total / batch_size
    del tape
    return means, curvatures, other_gradients, mean_log_likelihood

  def _check_calls(self, calls: list[LinearCall]) -> list[LinearCall]:
    """The recorded calls, which must cover every mean-field parameter once, in its order."""
    covered = [p for call in calls for p in (call.kernel, call.bias) if p is not None]
    if [id(p) for p in covered] != [id(p) for p in self.parameters]:
      raise ValueError("VOGN needs every mean-field parameter used once per forward pass by a "
                       "dense or convolution layer (per-example gradients in closed form)")
    return calls

  def _averaged_terms(self, inputs, labels):
    """(g, h, other gradients, mean log p), averaged over the examples and the weight draws."""
    draws = self.settings.mc_samples
    sums = None
    for _ in range(draws):
      gradients, curvatures, other_gradients, mean_log_likelihood = self.batch_terms(
          inputs, labels)
      terms = (gradients, curvatures, list(other_gradients), [mean_log_likelihood])
      sums = terms if sums is None else tuple(
          [a + b for a, b in zip(total, new)] for total, new in zip(sums, terms))
    return tuple([value / draws for value in group] for group in sums)

  def _delta_tilde(self, parameter) -> tf.Tensor:
    """tau * delta / N for one parameter (delta: its prior's precision)."""
    precision = 1.0 / tf.broadcast_to(parameter.prior_variance, parameter.posterior_loc.shape)
    return self.settings.tempering * precision / self._num_examples_float

  def set_posterior_scales(self) -> None:
    """sigma^2 = tau / (N (s + delta~)) into the layers' scale variables."""
    for parameter, curvature in zip(self.parameters, self.optimizer.curvatures):
      variance = self.settings.tempering / (
          self._num_examples_float * (curvature + self._delta_tilde(parameter)))
      _write(parameter.untransformed_posterior_scale,
             softplus_inverse(tf.sqrt(variance)))

  def set_empirical_bayes_priors(self, decay: float) -> None:
    """Each tensor's prior variance v := decay v + (1 - decay) mean(mu^2 + sigma^2) over the
    tensor; the mean is the v that minimises KL(q || N(0, v)) = sum_j [(mu_j^2 + sigma_j^2) / v
    + log v] / 2 + const (the KL is the only term of the ELBO that holds the prior)."""
    for parameter in self.parameters:
      optimum = tf.reduce_mean(tf.square(parameter.posterior_loc) + parameter.posterior_variance)
      variance = decay * tf.reduce_mean(tf.square(parameter.prior_scale)) + (1 - decay) * optimum
      scale = tf.broadcast_to(tf.sqrt(variance), parameter.untransformed_prior_scale.shape)
      _write(parameter.untransformed_prior_scale, softplus_inverse(scale))

  def _replica_terms(self, num_replicas: int, replica, inputs, labels,
                     transform_seed) -> tuple[tf.Tensor, tf.Tensor]:
    """(N * mean log p, KL) of this replica's examples: the forward pass of a VOGN step, where all
    its weight draws are made (what a step plan records for noise drawn ahead of chunks)."""
    del transform_seed
    with batch_shard(num_replicas, replica):
      kl = self.kl_fn()
      mean_log_likelihood = self._averaged_terms(inputs, labels)[3][0]
    return self._num_examples_float * mean_log_likelihood, kl

  def _global_batch_terms(self, indices: tf.Tensor):
    """(KL, g, h, other gradients, mean log p) of the global batch `indices`, each replica
    computing on its equal share and the averages all-reduced, so every replica holds the
    global batch's values whatever the number of replicas."""
    context, num_replicas, replica, inputs, labels = self._replica_share(indices)
    with batch_shard(num_replicas, replica):
      kl = self.kl_fn()
      terms = self._averaged_terms(inputs, labels)
    if num_replicas > 1:
      terms = context.all_reduce(tf.distribute.ReduceOp.MEAN, terms)
    return (kl,) + tuple(terms)

  def _replica_step(self, indices: tf.Tensor, transform_seed: tf.Tensor,
                    learning_rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One VOGN step on the global batch `indices`; (ELBO, KL) before it.

    Each replica updates its own copy of every variable with the same all-reduced terms (raw
    assignments, as `Adam.apply` does), so the copies stay equal.
    """
    del transform_seed
    kl, gradients, curvatures, other_gradients, mean_log_likelihood = self._global_batch_terms(
        indices)
    state, settings = self.optimizer, self.settings
    first = tf.logical_not(state.curvature_initialised)
    for parameter, gradient, curvature, momentum, s in zip(
        self.parameters, gradients, curvatures, state.momenta, state.curvatures):
      delta_tilde = self._delta_tilde(parameter)
      mu = parameter.posterior_loc
      new_s = tf.where(first, curvature,
                       settings.curvature_decay * s + (1 - settings.curvature_decay) * curvature)
      new_momentum = (settings.momentum * momentum +
                      (1 - settings.momentum) * (gradient + delta_tilde * mu))
      _write(s, new_s)
      _write(momentum, new_momentum)
      _write(mu, mu - learning_rate * new_momentum / (new_s + delta_tilde + settings.damping))
    _write(state.curvature_initialised, True)
    if state.adam is not None:
      state.adam.apply(other_gradients, learning_rate)
    self.set_posterior_scales()
    if settings.prior == "empirical_bayes":
      self.set_empirical_bayes_priors(settings.prior_decay)
    elbo = self._num_examples_float * mean_log_likelihood[0] - kl
    return elbo, kl

  def _replica_initialise(self, indices: tf.Tensor) -> None:
    _, _, curvatures, _, _ = self._global_batch_terms(indices)
    for s, curvature in zip(self.optimizer.curvatures, curvatures):
      _write(s, curvature)
    _write(self.optimizer.curvature_initialised, True)
    self.set_posterior_scales()

  @graph_function
  def _initialise(self, indices: tf.Tensor) -> None:
    self.strategy.run(self._replica_initialise, args=(indices,))

  def initialise_curvature(self) -> None:
    """s from the first minibatch (Algorithm 1's extra pass), and the scales from s."""
    if bool(self.optimizer.curvature_initialised.numpy()):
      return
    self._initialise(tf.random.stateless_uniform([self.batch_size], seed=[self.data_seed, 0],
                                                 maxval=self.num_examples, dtype=tf.int64))


def _write(variable: tf.Variable, value) -> None:
  """variable := value on this replica's copy (in replica context, where `assign` of a mirrored
  variable is refused), or on the one variable without a strategy."""
  tf.raw_ops.AssignVariableOp(resource=variable.handle,
                              value=tf.cast(value, variable.dtype))


class VognTrainer(CheckpointedTraining):
  """VOGN of `model` on in-memory data, checkpointed and resumable like `MeanFieldTrainer`."""

  def __init__(self, model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
               settings: Optional[VognSettings] = None,
               learning_rate: float | LearningRateSchedule = 1e-3, batch_size: int = 256,
               seed: int = 0, steps_per_checkpoint: int = 5000, summary_every: int = 100):
    maximizer = VognMaximizer(model, inputs, labels, log_likelihood_fn,
                              settings or VognSettings(), batch_size=batch_size, data_seed=seed)
    super().__init__(maximizer, learning_rate, steps_per_checkpoint=steps_per_checkpoint,
                     summary_every=summary_every, name="vogn")

  def train(self, num_steps: int, checkpoint_dir: Optional[str] = None,
            summary_dir: Optional[str] = None, after_chunk: Optional[Callable[[], None]] = None):
    """As `CheckpointedTraining.train`; a fresh run first initialises s from one minibatch."""
    if checkpoint_dir:
      self._restore(checkpoint_dir, num_steps)
    self.maximizer.initialise_curvature()
    return super().train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir,
                         after_chunk=after_chunk)
