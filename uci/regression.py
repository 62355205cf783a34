"""UCI test metrics in the original units of y, from Gaussian-head outputs for standardised
targets (`baselines.gaussian_head`)."""
from __future__ import annotations

import tensorflow as tf

from auxiliary_sampling.predictive import gaussian_log_likelihood, predictive_log_likelihood


def regression_metrics(outputs, labels_original, target_mean: float,
                       target_std: float) -> dict[str, float]:
  """Test MLL (log-mean-exp over the M members, mean over points) and RMSE of the mixture mean.

  `outputs` [M, N, 2] are predictions for standardised targets; both metrics
  are in the original units of y.
  """
  outputs = tf.convert_to_tensor(outputs, tf.float32)
  labels = tf.convert_to_tensor(labels_original, tf.float32)[..., 0]
  member_log_likelihoods = gaussian_log_likelihood(labels, outputs[..., 0], outputs[..., 1],
                                                   target_shift=target_mean,
                                                   target_scale=target_std)
  mixture_mean = target_mean + target_std * tf.reduce_mean(outputs[..., 0], axis=0)
  return {
      "test_mll": float(tf.reduce_mean(predictive_log_likelihood(member_log_likelihoods))),
      "test_rmse": float(tf.sqrt(tf.reduce_mean(tf.square(mixture_mean - labels)))),
  }
