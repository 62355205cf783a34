"""Test setup: legacy Keras before TensorFlow, quiet logs, every test seeded."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
  random.seed(0)
  np.random.seed(0)
  tf.random.set_seed(0)
  yield
