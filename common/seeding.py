"""One call that seeds every random number generator a run uses."""
from __future__ import annotations

import random

import numpy as np

from common.validation import check_integer


def seed_everything(seed: int) -> None:
  """Seeds Python, NumPy and TensorFlow (global generators), and puts Keras' initialisers back on
  Python's generator: after it, a model is built with the weights it gets in a fresh process."""
  import tensorflow as tf  # after the package set TF_USE_LEGACY_KERAS
  check_integer("seed", seed, minimum=0)
  _forget_keras_seed_generator()
  random.seed(seed)
  np.random.seed(seed)
  tf.random.set_seed(seed)


def _forget_keras_seed_generator() -> None:
  """`tf.keras.utils.set_random_seed` installs a generator that Keras' initialisers then draw
  their seeds from instead of Python's `random`, and that later seeding leaves where it was; a
  model built after such a call (by a user, or another test in the process) would otherwise get
  other weights than the same seed gives in a fresh process."""
  from tf_keras.src import backend
  holder = getattr(backend, "_SEED_GENERATOR", None)
  if getattr(holder, "generator", None) is not None:
    holder.generator = None
