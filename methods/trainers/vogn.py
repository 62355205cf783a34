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
from auxiliary_sampling.linear_calls import (LinearCall, calls_producing, gauss_newton_mean,
                                             mean_and_mean_square, record_linear_calls)
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import mean_field_parameters, model_kl
from auxiliary_sampling.parameters import softplus_inverse
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.training_loop import ReplicaBatch, TrainingLoop
from auxiliary_sampling.weight_noise import weight_noise_scope
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


class VognObjective(tf.Module):
  """The ELBO's terms as VOGN steps on them: at `mc_samples` per_batch weight draws, the batch
  means of the per-example gradients of -log p and of their curvature terms, the other
  trainables' gradients and the mean log p. `terms` is the step's forward pass (what a step plan
  records for noise drawn ahead of chunks); the trace is the usual minibatch ELBO estimate
  (N * mean log p - KL), whatever tau is."""

  def __init__(self, model: tf.Module, log_likelihood_fn: LogLikelihoodFn,
               settings: VognSettings, parameters: list, others: list[tf.Variable]):
    super().__init__(name="vogn_objective")
    self.model = model
    self.log_likelihood_fn = log_likelihood_fn
    self.settings = settings
    self.parameters = parameters
    self.locs = [p.posterior_loc for p in parameters]
    self.others = others

  def model_outputs(self, inputs) -> tf.Tensor:
    """The model's training-mode outputs at one weight draw per batch."""
    with weight_noise_scope("per_batch"):
      return self.model(inputs, training=True)

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

  def averaged_terms(self, inputs, labels):
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

  def terms(self, batch: ReplicaBatch) -> tuple[tf.Tensor, tf.Tensor]:
    """(N * mean log p, KL) of this replica's examples: the forward pass of a VOGN step, where all
    its weight draws are made."""
    kl = model_kl(self.model)
    mean_log_likelihood = self.averaged_terms(batch.inputs, batch.labels)[3][0]
    return batch.num_examples * mean_log_likelihood, kl

  def statistics(self, batch: ReplicaBatch):
    """(KL, g, h, other gradients, mean log p) of the global batch, each replica computing on its
    equal share and the averages all-reduced, so every replica holds the global batch's values
    whatever the number of replicas."""
    kl = model_kl(self.model)
    terms = self.averaged_terms(batch.inputs, batch.labels)
    if batch.num_replicas > 1:
      terms = batch.context.all_reduce(tf.distribute.ReduceOp.MEAN, terms)
    return (kl,) + tuple(terms)


class VognUpdate(tf.Module):
  """VOGN's step (Algorithm 1) on a `VognObjective`: momentum on the means, the curvature
  estimate s, the scales from s, Adam for the other trainables, and the closed-form
  empirical-Bayes prior if the settings ask for it."""

  def __init__(self, parameters: list, others: list[tf.Variable], settings: VognSettings):
    super().__init__(name="vogn_update")
    self.parameters = parameters
    self.settings = settings
    self.optimizer = VognState([p.posterior_loc for p in parameters], others)

  def reset(self) -> None:
    """Forgets the momenta, the curvature (the next step or `initialise` sets it afresh) and
    the other trainables' Adam state."""
    state = self.optimizer
    for slot in state.momenta + state.curvatures:
      slot.assign(tf.zeros_like(slot))
    state.curvature_initialised.assign(False)
    if state.adam is not None:
      state.adam.reset()

  def delta_tilde(self, parameter, num_examples: tf.Tensor) -> tf.Tensor:
    """tau * delta / N for one parameter (delta: its prior's precision)."""
    precision = 1.0 / tf.broadcast_to(parameter.prior_variance, parameter.posterior_loc.shape)
    return self.settings.tempering * precision / num_examples

  def set_posterior_scales(self, num_examples: tf.Tensor) -> None:
    """sigma^2 = tau / (N (s + delta~)) into the layers' scale variables."""
    for parameter, curvature in zip(self.parameters, self.optimizer.curvatures):
      variance = self.settings.tempering / (
          num_examples * (curvature + self.delta_tilde(parameter, num_examples)))
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

  def step(self, objective: VognObjective, batch: ReplicaBatch, learning_rate: tf.Tensor
           ) -> tuple[tf.Tensor, tf.Tensor]:
    """One VOGN step on the global batch; (ELBO, KL) before it.

    Each replica updates its own copy of every variable with the same all-reduced terms (raw
    assignments, as `Adam.apply` does), so the copies stay equal.
    """
    kl, gradients, curvatures, other_gradients, mean_log_likelihood = objective.statistics(batch)
    state, settings = self.optimizer, self.settings
    num_examples = batch.num_examples
    first = tf.logical_not(state.curvature_initialised)
    for parameter, gradient, curvature, momentum, s in zip(
        self.parameters, gradients, curvatures, state.momenta, state.curvatures):
      delta_tilde = self.delta_tilde(parameter, num_examples)
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
    self.set_posterior_scales(num_examples)
    if settings.prior == "empirical_bayes":
      self.set_empirical_bayes_priors(settings.prior_decay)
    elbo = num_examples * mean_log_likelihood[0] - kl
    return elbo, kl

  def initialise(self, objective: VognObjective, batch: ReplicaBatch) -> None:
    """s from one minibatch (Algorithm 1's extra pass), and the scales from s."""
    _, _, curvatures, _, _ = objective.statistics(batch)
    for s, curvature in zip(self.optimizer.curvatures, curvatures):
      _write(s, curvature)
    _write(self.optimizer.curvature_initialised, True)
    self.set_posterior_scales(batch.num_examples)


def vogn_loop(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn,
              settings: VognSettings, batch_size: int, data_seed: int = 0,
              loop_settings: LoopSettings = LoopSettings()) -> TrainingLoop:
  """VOGN of `model`'s Gaussian mean-field posterior on the training loop."""
  inputs, labels = check_data(inputs, labels)
  model(inputs[:1])
  parameters = mean_field_parameters(model)
  if not parameters:
    raise ValueError("VOGN needs a model with Gaussian mean-field parameters")
  if any(p.num_members is not None for p in parameters):
    raise ValueError("VOGN trains one posterior: build the model without a member axis")
  if any(p.untransformed_prior_scale.trainable for p in parameters):
    raise ValueError("VOGN sets its prior itself (fixed or by closed-form empirical Bayes): "
                     "build the model with trainable_prior_scale=False")
  mean_field_ids = {id(v) for p in parameters for v in p.state_variables}
  others = [v for v in model.trainable_variables if id(v) not in mean_field_ids]
  return TrainingLoop(VognObjective(model, log_likelihood_fn, settings, parameters, others),
                      VognUpdate(parameters, others, settings),
                      UniformBatches(inputs, labels, batch_size), data_seed=data_seed,
                      loop_settings=loop_settings)


def initialise_curvature(loop: TrainingLoop) -> None:
  """s from the first minibatch of a VOGN loop (Algorithm 1's extra pass), and the scales from
  s; nothing once s is set."""
  if bool(loop.update.optimizer.curvature_initialised.numpy()):
    return
  loop.initialise(tf.random.stateless_uniform(
      [loop.batches.batch_size], seed=[loop.data_seed, 0], maxval=loop.batches.num_examples,
      dtype=tf.int64))


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
               seed: int = 0, steps_per_checkpoint: int = 5000, summary_every: int = 100,
               loop_settings: LoopSettings = LoopSettings()):
    loop = vogn_loop(model, inputs, labels, log_likelihood_fn, settings or VognSettings(),
                     batch_size=batch_size, data_seed=seed, loop_settings=loop_settings)
    super().__init__(loop, learning_rate, steps_per_checkpoint=steps_per_checkpoint,
                     summary_every=summary_every, name="vogn")

  def train(self, num_steps: int, checkpoint_dir: Optional[str] = None,
            summary_dir: Optional[str] = None, after_chunk: Optional[Callable[[], None]] = None):
    """As `CheckpointedTraining.train`; a fresh run first initialises s from one minibatch."""
    if checkpoint_dir:
      self._restore(checkpoint_dir, num_steps)
    initialise_curvature(self.loop)
    return super().train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir,
                         after_chunk=after_chunk)
