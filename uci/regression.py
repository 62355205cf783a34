"""UCI test metrics in the original units of y, from Gaussian-head outputs for standardised
targets (`methods.trainers.gaussian_head`)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from scipy import stats

from auxiliary_sampling.predictive import gaussian_log_likelihood, predictive_log_likelihood


# Nominal levels of the regression calibration error: 0.05, 0.10, ..., 0.95.
CALIBRATION_LEVELS = np.linspace(0.05, 0.95, 19)


def calibration_error(probability_integral_transforms) -> float:
  """Mean over nominal levels p of |p - the fraction of test points whose predictive CDF at the
  label, F_i(y_i), is at most p| (Kuleshov et al. 2018's calibration of a regressor, with the
  absolute rather than squared gap, the regression counterpart of a classifier's ECE): 0 when the
  predictive quantiles cover as often as they claim."""
  transforms = np.asarray(probability_integral_transforms, np.float64)
  covered = np.mean(transforms[None, :] <= CALIBRATION_LEVELS[:, None], axis=1)
  return float(np.mean(np.abs(covered - CALIBRATION_LEVELS)))


def calibration_error_floor(num_points: int) -> float:
  """The calibration error a perfectly calibrated predictive scores on average over
  `num_points` independent test points (its F_i(y_i) uniform, so the covered count at level p
  is Binomial(n, p)): mean over the levels of E|Binomial(n, p) / n - p|. Sampling alone puts a
  small test set's error near this (Boston's 101 points: 0.032), so compare errors above it."""
  counts = np.arange(num_points + 1)
  return float(np.mean([np.sum(stats.binom.pmf(counts, num_points, level)
                               * np.abs(counts / num_points - level))
                        for level in CALIBRATION_LEVELS]))


def regression_metrics(outputs, labels_original, target_mean: float,
                       target_std: float) -> dict[str, float]:
  """Test MLL (log-mean-exp over the M members, mean over points), RMSE of the mixture mean and
  the calibration error of the mixture (`calibration_error`).

  `outputs` [M, N, 2] are predictions for standardised targets; the MLL and RMSE
  are in the original units of y.
  """
  outputs = tf.convert_to_tensor(outputs, tf.float32)
  labels = tf.convert_to_tensor(labels_original, tf.float32)[..., 0]
  member_log_likelihoods = gaussian_log_likelihood(labels, outputs[..., 0], outputs[..., 1],
                                                   target_shift=target_mean,
                                                   target_scale=target_std)
  mixture_mean = target_mean + target_std * tf.reduce_mean(outputs[..., 0], axis=0)
  standardised_labels = (labels - target_mean) / target_std
  mixture_cdf = tf.reduce_mean(
      0.5 * tf.math.erfc(-(standardised_labels - outputs[..., 0]) / (outputs[..., 1] * 2**0.5)),
      axis=0)
  return {
      "test_mll": float(tf.reduce_mean(predictive_log_likelihood(member_log_likelihoods))),
      "test_rmse": float(tf.sqrt(tf.reduce_mean(tf.square(mixture_mean - labels)))),
      "calibration_error": calibration_error(mixture_cdf.numpy()),
  }
