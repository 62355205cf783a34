"""One call that seeds every random number generator a run uses."""
from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int) -> None:
  """Seeds Python, NumPy and TensorFlow (global generators)."""
  import tensorflow as tf  # after the package set TF_USE_LEGACY_KERAS
  if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
    raise ValueError(f"seed={seed!r} must be an integer >= 0")
  random.seed(seed)
  np.random.seed(seed)
  tf.random.set_seed(seed)
