"""Adam (Kingma & Ba 2015) with state that can be reset, for compiled training loops.

Refinement restarts Adam for every auxiliary variable (paper Algorithm 1);
Keras optimisers cannot be reset inside a `tf.function` without rebuilding.
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf


class Adam(tf.Module):
  """Adam with resettable moments, usable inside compiled loops.

  Element-wise, so M members stacked on a leading axis are optimised exactly as
  M separate runs would be.
  """

  def __init__(self, variables: Sequence[tf.Variable], beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-7):
    super().__init__(name="adam")
    self.variables_to_train = list(variables)
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.first_moments = [tf.Variable(tf.zeros_like(v), trainable=False)
                          for v in self.variables_to_train]
    self.second_moments = [tf.Variable(tf.zeros_like(v), trainable=False)
                           for v in self.variables_to_train]
    # Counted once per step whatever the number of replicas.
    self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def reset(self) -> None:
    """Forgets the moment estimates (a fresh optimiser)."""
    for slot in self.first_moments + self.second_moments:
      slot.assign(tf.zeros_like(slot))
    self.iterations.assign(0)

  def apply(self, gradients: Sequence[tf.Tensor], learning_rate: tf.Tensor) -> None:
    """One Adam step, one fused kernel per variable (few ops: this loop is op-bound on CPU).

    Under a `tf.distribute` strategy, call it in replica context with the
    all-reduced gradients: each replica updates its own copy of every
    variable and moment identically, so the copies stay equal.
    """
    step = tf.cast(self.iterations.assign_add(1), tf.float32)
    beta_1_power, beta_2_power = tf.pow(self.beta_1, step), tf.pow(self.beta_2, step)
    for variable, gradient, m, v in zip(self.variables_to_train, gradients, self.first_moments,
                                        self.second_moments):
      tf.raw_ops.ResourceApplyAdam(
          var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta_1_power,
          beta2_power=beta_2_power, lr=learning_rate, beta1=tf.constant(self.beta_1),
          beta2=tf.constant(self.beta_2), epsilon=tf.constant(self.epsilon), grad=gradient)
