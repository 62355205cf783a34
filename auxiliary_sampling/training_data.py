"""The in-memory training data and its log-likelihood, as the ELBO code takes them."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

# log p(y | outputs): maps (labels [batch, ...], model outputs [M?, batch, ...])
# to per-example log-likelihoods [M?, batch].
LogLikelihoodFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def check_data(inputs, labels) -> tuple[tf.Tensor, tf.Tensor]:
  """Converts training data to tensors and checks that inputs and labels pair up."""
  inputs, labels = tf.convert_to_tensor(inputs), tf.convert_to_tensor(labels)
  if inputs.shape.rank == 0 or labels.shape.rank == 0 or inputs.shape[0] != labels.shape[0]:
    raise ValueError(f"inputs have {inputs.shape[0] if inputs.shape.rank else 'no'} examples but "
                     f"labels have {labels.shape[0] if labels.shape.rank else 'no'}")
  if inputs.shape[0] == 0:
    raise ValueError("the training data is empty")
  return inputs, labels
