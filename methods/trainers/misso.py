"""MISSO for variational inference: incremental minimisation of quadratic surrogates.

The MISSO note ("Variational Inference and Dropout", an anonymous workshop draft applying
MISSO, Karimi et al. 2019, to VI of LeNet-5) splits the negated ELBO into a finite sum
L = (1/n) sum_i L_i and keeps, for every index i, a quadratic surrogate of L_i built at the iterate
theta_i where i was last drawn (its Eq. 4): L_i(theta_i) + <m_i, theta - theta_i> + (L/2) |theta -
theta_i|^2, with m_i a reparameterised Monte Carlo gradient of L_i at theta_i (Eqs. 5-6). Each
step draws one index, refreshes its (theta_i, m_i), and jumps to the minimiser of the surrogates'
sum (Eq. 7):

  theta <- (1/n) sum_i theta_i - step_size * (1/n) sum_i m_i,   step_size = 1 / (2 gamma).

An index is a minibatch: the training set is split once (from the data seed) into ceil(N / B)
fixed blocks of B examples (the last one wrapping around to the first examples), as storing a
gradient per example is out of reach for a network. m_i is the gradient of the block's loss at
the per-example scale, mean_block(-log p(y | x, w)) + KL / N, the objective every VI step of this
suite differentiates. Blocks are drawn uniformly with replacement after one initialisation pass
that visits every block once at theta_0 without moving (MISSO's surrogates at the initial point),
so a run's first ceil(N / B) steps are that pass. The note's "sum over i" with step size 1/(2
gamma) equals the average with step size n / (2 gamma): `step_size` covers both readings.

The stored iterates and gradients cost 2 * blocks * parameters floats (LeNet-5's 123k variational
parameters in 469 blocks of 128: 0.46 GB). One device only.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import tensorflow as tf

from auxiliary_sampling.elbo_objective import GradientUpdate
from auxiliary_sampling.training_batches import plain_data
from auxiliary_sampling.training_loop import Objective, ReplicaBatch
from common.validation import check_integer


class IncrementalSurrogateOptimizer(tf.Module):
  """MISSO's update (Eq. 7) over `num_blocks` stored (iterate, gradient) pairs.

  `block` names the block whose gradient the next `apply` brings; the first `num_blocks` applies
  only store (the initialisation pass), later ones also move the variables.
  """

  def __init__(self, variables: Sequence[tf.Variable], num_blocks: int):
    super().__init__(name="misso")
    self.variables_to_train = list(variables)
    self.num_blocks = int(num_blocks)
    if self.num_blocks < 1:
      raise ValueError(f"num_blocks={num_blocks!r} is out of range; allowed: >= 1")

    def table(variable):
      return tf.Variable(tf.zeros([self.num_blocks, *variable.shape], variable.dtype),
                         trainable=False)
    self.stored_iterates = [table(v) for v in self.variables_to_train]
    self.stored_gradients = [table(v) for v in self.variables_to_train]
    self.iterate_sums = [tf.Variable(tf.zeros_like(v), trainable=False)
                         for v in self.variables_to_train]
    self.gradient_sums = [tf.Variable(tf.zeros_like(v), trainable=False)
                          for v in self.variables_to_train]
    self.block = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False)

  def reset(self) -> None:
    """Forgets every surrogate: the next `num_blocks` applies only store (a new initialisation
    pass if the loop's batch counter restarts with it, `TrainingLoop.reseed`)."""
    for state in (self.stored_iterates + self.stored_gradients + self.iterate_sums
                  + self.gradient_sums):
      state.assign(tf.zeros_like(state))
    self.iterations.assign(0)

  def apply(self, gradients: Sequence[tf.Tensor], learning_rate: tf.Tensor) -> None:
    """Refreshes block `block`'s surrogate at the current iterate and, once every block has one,
    moves to the minimiser of their sum; `learning_rate` is the step size 1 / (2 gamma)."""
    iteration = self.iterations.assign_add(1)
    moving = iteration > self.num_blocks
    block = self.block.read_value()
    inverse_count = 1.0 / self.num_blocks
    for variable, gradient, iterates, stored_gradients, iterate_sum, gradient_sum in zip(
        self.variables_to_train, gradients, self.stored_iterates, self.stored_gradients,
        self.iterate_sums, self.gradient_sums):
      current = variable.read_value()
      iterate_sum.assign_add(current - tf.gather(iterates, block))
      gradient_sum.assign_add(gradient - tf.gather(stored_gradients, block))
      iterates.scatter_update(tf.IndexedSlices(current[tf.newaxis], block[tf.newaxis]))
      stored_gradients.scatter_update(tf.IndexedSlices(gradient[tf.newaxis], block[tf.newaxis]))
      minimiser = inverse_count * (iterate_sum - learning_rate * gradient_sum)
      variable.assign(tf.where(moving, minimiser, current))


class BlockBatches:
  """The training set split once, from `data_seed`, into ceil(N / B) fixed blocks of B examples
  (the last wrapping around to the first examples); step `count` takes block count - 1 during
  the initialisation pass, then uniformly drawn blocks."""

  def __init__(self, inputs, labels, batch_size: int, data_seed: int):
    self.inputs, self.labels = plain_data(inputs, labels)
    self.batch_size = check_integer("batch_size", batch_size)
    self.num_examples = int(self.inputs.shape[0])
    self.num_blocks = math.ceil(self.num_examples / batch_size)
    order = np.random.default_rng(data_seed).permutation(self.num_examples)
    positions = np.arange(self.num_blocks * batch_size) % self.num_examples
    self.blocks = tf.constant(order[positions].reshape(self.num_blocks, batch_size), tf.int64)
    # Each example's block as a first example: no two blocks start with the same one.
    self.block_starts = tf.constant(np.argsort(order) // batch_size, tf.int64)

  @property
  def batch_shape(self) -> list[int]:
    return [self.batch_size]

  def example_indices(self, seed, first_count, num_steps):
    steps = 1 if num_steps is None else num_steps
    counts = tf.cast(first_count, tf.int64) + tf.range(steps, dtype=tf.int64)
    drawn = tf.random.stateless_uniform([steps], seed=seed, maxval=self.num_blocks,
                                        dtype=tf.int64)
    blocks = tf.where(counts <= self.num_blocks, counts - 1, drawn)
    indices = tf.gather(self.blocks, blocks)
    return indices[0] if num_steps is None else indices

  def gather(self, data, indices):
    return tf.gather(data, indices)


class SurrogateUpdate(tf.Module):
  """MISSO's step: the gradient of the block's objective refreshes its surrogate
  (`IncrementalSurrogateOptimizer`), the block named by the batch's first example."""

  def __init__(self, surrogates: IncrementalSurrogateOptimizer, batches: BlockBatches):
    super().__init__(name="surrogate_update")
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync > 1:
      raise ValueError(f"MISSO keeps its surrogates on one device, but the strategy has "
                       f"{strategy.num_replicas_in_sync} replicas; allowed: one replica")
    self.optimizer = surrogates
    self.batches = batches
    self.gradient_update = GradientUpdate(surrogates)

  def reset(self) -> None:
    self.optimizer.reset()

  def step(self, objective: Objective, batch: ReplicaBatch, learning_rate: tf.Tensor
           ) -> tuple[tf.Tensor, tf.Tensor]:
    self.optimizer.block.assign(tf.gather(self.batches.block_starts, batch.indices[0]))
    return self.gradient_update.step(objective, batch, learning_rate)
