"""The (conditional) ELBO as a training loop's objective, and the gradient step that ascends it.

Mean-field VI and each refinement step maximise the same objective,
E_q log p(y | x, w) - KL(q(w) || p(w | a_1..k)) (paper Eq. 4), over different
variables: VI over all trainable variables (including the empirical-Bayes prior
scales), refinement over the posterior parameters only, with Adam reset for
every new auxiliary variable. Composed on `TrainingLoop`:

  TrainingLoop(ElboObjective(model, log_likelihood_fn), GradientUpdate(Adam(variables)),
               UniformBatches(inputs, labels, batch_size), data_seed=seed)
"""
from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from auxiliary_sampling.model_parameters import model_kl
from auxiliary_sampling.training_data import LogLikelihoodFn
from auxiliary_sampling.training_loop import Objective, ReplicaBatch
from auxiliary_sampling.weight_noise import check_weight_noise, weight_noise_scope


class ElboObjective(tf.Module):
  """N * mean_batch log p(y | x, w) and KL(q || p), the ELBO's terms, one value per member.

  `kl_fn` replaces the Gaussian mean-field KL (MNF's bound term; zero for
  point estimates; plus N times an L2 penalty). `weight_noise` (one of
  WEIGHT_NOISE) is how the model's mean-field layers draw noise in its calls.
  `expected_log_likelihood` is the hook for another likelihood term (the deep
  ensemble's adversarial training).
  """

  def __init__(self, model: tf.Module, log_likelihood_fn: LogLikelihoodFn,
               kl_fn: Optional[Callable[[], tf.Tensor]] = None,
               weight_noise: str = "per_example"):
    super().__init__(name="elbo_objective")
    self.model = model
    self.log_likelihood_fn = log_likelihood_fn
    self.kl_fn = kl_fn or (lambda: model_kl(model))
    self.weight_noise = check_weight_noise(weight_noise)

  def model_outputs(self, inputs) -> tf.Tensor:
    """The model's training-mode outputs, its layers drawing weight noise `weight_noise`-wise."""
    with weight_noise_scope(self.weight_noise):
      return self.model(inputs, training=True)

  def expected_log_likelihood(self, inputs, labels, num_examples: tf.Tensor) -> tf.Tensor:
    """N * mean_batch log p(y | x, w), one value per member."""
    log_likelihood = self.log_likelihood_fn(labels, self.model_outputs(inputs))
    return num_examples * tf.reduce_mean(log_likelihood, axis=-1)

  def terms(self, batch: ReplicaBatch) -> tuple[tf.Tensor, tf.Tensor]:
    """(expected log-likelihood, KL) on this replica's examples."""
    kl = self.kl_fn()
    return self.expected_log_likelihood(batch.inputs, batch.labels, batch.num_examples), kl


class GradientUpdate(tf.Module):
  """A step of `optimizer` (Adam, momentum SGD, MISSO's surrogates: anything with
  `variables_to_train`, `apply(gradients, learning_rate)` and `reset()`) on the negated
  objective, likelihood term - KL term, divided by N; records that difference and the KL.

  With R replicas each holds B / R examples. Its loss is its share of the
  global loss: its likelihood term (N * mean over its examples) and the KL,
  both divided by R. The all-reduced sum of the R gradients is then the
  gradient of N * mean over the global batch minus the KL counted once,
  the same objective as on one device, whatever R is.
  """

  def __init__(self, optimizer: tf.Module):
    super().__init__(name="gradient_update")
    self.optimizer = optimizer
    if not optimizer.variables_to_train:
      raise ValueError("no variables to train")

  def reset(self) -> None:
    self.optimizer.reset()

  def step(self, objective: Objective, batch: ReplicaBatch, learning_rate: tf.Tensor
           ) -> tuple[tf.Tensor, tf.Tensor]:
    num_replicas = batch.num_replicas
    with tf.GradientTape() as tape:
      likelihood_term, kl = objective.terms(batch)
      value = likelihood_term - kl
      # Members are independent, so the sum's gradient is each member's own.
      loss = -tf.reduce_sum(value if num_replicas == 1 else value / num_replicas
                            ) / batch.num_examples
    gradients = tape.gradient(loss, self.optimizer.variables_to_train)
    if num_replicas > 1:
      gradients = batch.context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
      value = batch.context.all_reduce(tf.distribute.ReduceOp.MEAN, likelihood_term) - kl
    self.optimizer.apply(gradients, learning_rate)
    return value, kl
