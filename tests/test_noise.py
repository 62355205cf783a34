"""The weight-noise streams: Box-Muller normals and per-member rows."""
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from auxiliary_sampling.noise import MemberNoise, box_muller_normal

_SIZE = 400_001   # odd: the last pair is cut


def _draws(seed=(3, 7), shape=(_SIZE,)):
  return box_muller_normal(tf.constant(shape), tf.constant(seed, tf.int64)).numpy()


def test_box_muller_draws_are_standard_normal():
  """Catches a wrong transform: sqrt(-log u) instead of sqrt(-2 log u) halves the variance, a
  missing 2 pi in the angle bends the distribution, and one half reusing the other's values
  correlates the pairs; each moves one of these statistics by far more than its tolerance."""
  draws = _draws()
  assert draws.shape == (_SIZE,) and np.all(np.isfinite(draws))
  standard_error = 1.0 / np.sqrt(_SIZE)
  assert abs(draws.mean()) < 5 * standard_error
  assert abs(draws.var() - 1.0) < 5 * np.sqrt(2.0) * standard_error
  assert abs(scipy.stats.kurtosis(draws, fisher=False) - 3.0) < 5 * np.sqrt(24.0) * standard_error
  assert scipy.stats.kstest(draws, "norm").pvalue > 1e-3
  half = (_SIZE + 1) // 2
  cosines, sines = draws[:half - 1], draws[half:]
  assert abs(np.corrcoef(cosines, sines)[0, 1]) < 5 * standard_error * np.sqrt(2.0)
  assert abs(np.corrcoef(np.square(cosines), np.square(sines))[0, 1]) < 0.02


def test_box_muller_is_a_function_of_the_seed_and_the_shape():
  first, again = _draws(shape=(6, 7)), _draws(shape=(6, 7))
  np.testing.assert_array_equal(first, again)
  assert not np.allclose(first, _draws(seed=(3, 8), shape=(6, 7)))
  low_precision = box_muller_normal(tf.constant([4, 5]), tf.constant([1, 2], tf.int64),
                                    tf.bfloat16)
  assert low_precision.dtype == tf.bfloat16
  np.testing.assert_allclose(low_precision.numpy().astype(np.float32),
                             _draws(seed=(1, 2), shape=(4, 5)), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("per_example", [False, True])
def test_a_member_window_sees_the_rows_of_the_whole_draw(per_example):
  """Vectorised refinement equals one member at a time only if member m's noise rows do not
  depend on how many members a layer computes; catches a sampler whose values depend on the
  drawn window (e.g. Box-Muller pairs formed across the member axis of the window only)."""
  whole = MemberNoise(5, initial_seed=11)
  window = MemberNoise(2, total_members=5, member_offset=3, initial_seed=11)
  for _ in range(3):
    all_rows = whole.normal([4, 3], per_example=per_example).numpy()
    np.testing.assert_array_equal(window.normal([4, 3], per_example=per_example).numpy(),
                                  all_rows[3:])
