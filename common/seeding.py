"""One call that seeds every random number generator a run uses."""
from __future__ import annotations

import random

import numpy as np

from auxiliary_sampling.validation import check_integer


def seed_everything(seed: int) -> None:
  """Seeds Python, NumPy and TensorFlow (global generators)."""
  import tensorflow as tf  # after the package set TF_USE_LEGACY_KERAS
  check_integer("seed", seed, minimum=0)
  random.seed(seed)
  np.random.seed(seed)
  tf.random.set_seed(seed)
