"""Classification metrics of a predictive built from M posterior samples (or ensemble members).

The predictive is p(y | x) = (1/M) sum_m softmax(logits_m)(y); every metric is
a function of its per-class log-probabilities [N, C]: MLL (the mean log
predictive probability of the label), accuracy, the multi-class Brier score
(mean over examples of sum_c (p_c - 1[y = c])^2) and the expected calibration
error (15 equal-width confidence bins, Guo et al. 2017).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from auxiliary_sampling.graph_loops import graph_function
from auxiliary_sampling.predictive import log_mean_exp, to_float32_if_half
from auxiliary_sampling.progress import ProgressLog

NUM_CALIBRATION_BINS = 15


def predictive_log_probabilities(member_logits) -> tf.Tensor:
  """[N, C] log (1/M) sum_m softmax(logits_m) from [M, N, C] logits (or [N, C] for one model)."""
  member_logits = tf.convert_to_tensor(member_logits)
  log_probabilities = tf.nn.log_softmax(member_logits, axis=-1)
  if member_logits.shape.rank == 2:
    return log_probabilities
  return log_mean_exp(log_probabilities, axis=0)


def predict_member_log_probabilities(sample_logits: Callable[[tf.Tensor], tf.Tensor],
                                     dataset: tf.data.Dataset) -> np.ndarray:
  """Each sample's (member's) log-softmax [M, N, C] over a batched (images, labels) dataset.

  The dataset is read batch by batch.

  One model's [N, C] logits count as M = 1. Log-probabilities are logits of the same softmax, so
  `predictive_log_probabilities` of this array is the predictive of these same draws.
  """
  def member_log_softmax(images):
    logits = to_float32_if_half(sample_logits(images))
    logits = logits[tf.newaxis] if logits.shape.rank == 2 else logits
    return tf.nn.log_softmax(logits, axis=-1)
  predict = graph_function(member_log_softmax, reduce_retracing=True)
  num_batches = int(dataset.cardinality().numpy())
  progress = ProgressLog("evaluation (batches)", max(num_batches, 0))
  outputs = []
  for batch, (images, _) in enumerate(dataset, 1):
    outputs.append(predict(images).numpy())
    progress.log_every(batch)
  return np.concatenate(outputs, axis=1)


def member_metrics(member_log_probabilities, labels) -> dict[str, float]:
  """The members' own test MLL and accuracy from [M, N, C] log-probabilities, averaged over members.

  Beside the predictive's metrics they show what averaging the members buys, and how
  overconfident single members are (a member MLL far below the predictive's).
  """
  member_log_probabilities = np.asarray(member_log_probabilities, np.float64)
  labels = np.asarray(labels).astype(np.int64)
  if member_log_probabilities.ndim != 3 or member_log_probabilities.shape[1] != len(labels):
    raise ValueError(
        f"member log-probabilities of shape {member_log_probabilities.shape} do not match "
        f"{len(labels)} labels")
  label_log_probabilities = member_log_probabilities[:, np.arange(len(labels)), labels]
  return {"member_test_mll": float(np.mean(label_log_probabilities)),
          "member_test_accuracy": float(np.mean(member_log_probabilities.argmax(axis=2) == labels))}


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray,
                               num_bins: int = NUM_CALIBRATION_BINS) -> float:
  """sum_b (n_b / N) |accuracy_b - confidence_b|.

  The bins b are equal-width bins of the top-class probability.
  """
  confidence = probabilities.max(axis=1)
  correct = probabilities.argmax(axis=1) == labels
  bins = np.minimum((confidence * num_bins).astype(int), num_bins - 1)
  error = 0.0
  for b in range(num_bins):
    in_bin = bins == b
    if in_bin.any():
      error += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
  return float(error)


def label_log_probabilities(log_probabilities, labels) -> np.ndarray:
  """[N] log p(y_n | x_n): each example's log predictive probability of its label, from [N, C].

  Their mean is test_mll; kept per example, two runs scored on one test set can be compared
  example by example (a paired standard error of their MLL difference, even on one seed)."""
  log_probabilities = np.asarray(log_probabilities)
  labels = np.asarray(labels).astype(np.int64)
  if log_probabilities.ndim != 2 or len(log_probabilities) != len(labels):
    raise ValueError(
        f"log-probabilities of shape {log_probabilities.shape} do not match {len(labels)} labels")
  return log_probabilities[np.arange(len(labels)), labels]


def classification_metrics(log_probabilities, labels) -> dict[str, float]:
  """test_mll, test_accuracy, brier and ece of a predictive's [N, C] log-probabilities."""
  log_probabilities = np.asarray(log_probabilities, np.float64)
  labels = np.asarray(labels).astype(np.int64)
  if log_probabilities.ndim != 2 or len(log_probabilities) != len(labels):
    raise ValueError(
        f"log-probabilities of shape {log_probabilities.shape} do not match {len(labels)} labels")
  probabilities = np.exp(log_probabilities)
  one_hot = np.eye(log_probabilities.shape[1])[labels]
  return {
      "test_mll": float(np.mean(label_log_probabilities(log_probabilities, labels))),
      "test_accuracy": float(np.mean(probabilities.argmax(axis=1) == labels)),
      "brier": float(np.mean(np.sum(np.square(probabilities - one_hot), axis=1))),
      "ece": expected_calibration_error(probabilities, labels),
  }
