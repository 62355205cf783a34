"""uci.regression: the calibration error of the predictive mixture against exact values."""
import numpy as np
import pytest
from scipy import stats

from uci.regression import (CALIBRATION_LEVELS, calibration_error, calibration_error_floor,
                            regression_metrics)

TARGET_MEAN, TARGET_STD = 3.0, 10.0


def _metrics(locs, scales, standardised_labels):
  """Metrics of members with standardised `locs` and `scales` [M, N] on labels given in
  standardised units (passed in original units, as the binary does)."""
  outputs = np.stack([locs, scales], axis=-1).astype(np.float32)
  labels = (TARGET_MEAN + TARGET_STD * standardised_labels)[:, None]
  return regression_metrics(outputs, labels, TARGET_MEAN, TARGET_STD)


def test_a_predictive_that_is_the_data_distribution_is_calibrated():
  """Labels drawn from a two-member mixture (means -1, +1, scale 0.5) scored by that mixture:
  the error is sampling noise only. Catches a CDF taken of one member or of the mixture mean with
  the members' scale (both miscalibrated here), or labels left in original units."""
  rng = np.random.default_rng(0)
  size = 100_000
  member = rng.integers(2, size=size)
  labels = np.where(member == 0, -1.0, 1.0) + 0.5 * rng.normal(size=size)
  locs = np.stack([np.full(size, -1.0), np.full(size, 1.0)])
  metrics = _metrics(locs, np.full((2, size), 0.5), labels)
  assert metrics["calibration_error"] < 0.004


def test_an_overconfident_predictive_has_the_exact_miscalibration():
  """A predictive with half the data's scale: F(y) <= p exactly when z <= Phi^-1(p) / 2, so
  the covered fraction is Phi(Phi^-1(p) / 2); the error is the mean over the 19 levels of
  |p - that| (0.102). Catches a squared gap, other levels, or the coverage inverted."""
  rng = np.random.default_rng(1)
  size = 200_000
  labels = rng.normal(size=size)
  metrics = _metrics(np.zeros((1, size)), np.full((1, size), 0.5), labels)
  exact = np.mean(np.abs(stats.norm.cdf(stats.norm.ppf(CALIBRATION_LEVELS) / 2)
                         - CALIBRATION_LEVELS))
  assert exact == pytest.approx(0.102, abs=0.001)
  assert metrics["calibration_error"] == pytest.approx(exact, abs=0.003)


def test_the_floor_is_what_a_calibrated_predictive_scores_on_that_many_points():
  """Monte Carlo: 20,000 test sets of 101 uniform PITs (a calibrated predictive on Boston's test
  split) average the exact floor. Catches a floor over other levels, of squared gaps, or the
  coverage's standard deviation in place of its mean absolute deviation (0.0406 here)."""
  rng = np.random.default_rng(2)
  scores = [calibration_error(rng.uniform(size=101)) for _ in range(20_000)]
  standard_error = np.std(scores) / np.sqrt(len(scores))
  floor = calibration_error_floor(101)
  assert floor == pytest.approx(0.0324, abs=5e-4)
  assert abs(np.mean(scores) - floor) < 3 * standard_error
  assert calibration_error_floor(9146) < calibration_error_floor(101) / 5
