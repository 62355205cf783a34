"""SGD with heavy-ball momentum, as an optimiser of a `GradientUpdate` (the "Momentum" baseline of
the MISSO note's Figure 1: the anonymous note "Variational Inference and Dropout")."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf


class MomentumSgd(tf.Module):
  """v <- momentum * v + g; w <- w - learning_rate * v, with resettable state.

  Element-wise (members on a leading axis are separate runs); under a `tf.distribute` strategy,
  apply it in replica context with all-reduced gradients, as `auxiliary_sampling.adam.Adam`.
  """

  def __init__(self, variables: Sequence[tf.Variable], momentum: float = 0.9):
    super().__init__(name="momentum_sgd")
    if not 0 <= momentum < 1:
      raise ValueError(f"momentum={momentum!r} is out of range; allowed: >= 0 and < 1")
    self.variables_to_train = list(variables)
    self.momentum = float(momentum)
    self.velocities = [tf.Variable(tf.zeros_like(v), trainable=False)
                       for v in self.variables_to_train]
    self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def reset(self) -> None:
    """Forgets the velocities (a fresh optimiser)."""
    for velocity in self.velocities:
      velocity.assign(tf.zeros_like(velocity))
    self.iterations.assign(0)

  def apply(self, gradients: Sequence[tf.Tensor], learning_rate: tf.Tensor) -> None:
    """One step, one fused kernel per variable."""
    self.iterations.assign_add(1)
    for variable, gradient, velocity in zip(self.variables_to_train, gradients, self.velocities):
      tf.raw_ops.ResourceApplyMomentum(var=variable.handle, accum=velocity.handle,
                                       lr=learning_rate, grad=gradient,
                                       momentum=tf.constant(self.momentum))
