"""Classification metrics against closed forms: mixture MLL, Brier, ECE, accuracy."""
import numpy as np
import pytest
import tensorflow as tf

from runner.classification_metrics import (classification_metrics, expected_calibration_error,
                                           member_metrics, predict_member_log_probabilities,
                                           predictive_log_probabilities)


def test_predictive_is_the_mixture_of_member_softmaxes():
  logits = np.random.default_rng(0).normal(size=(4, 6, 3)).astype(np.float32)
  probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  expected = np.log(probabilities.mean(axis=0))
  np.testing.assert_allclose(
      predictive_log_probabilities(logits).numpy(), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      predictive_log_probabilities(logits[0]).numpy(), np.log(probabilities[0]), rtol=1e-5,
      atol=1e-6)


def test_metrics_of_known_predictives():
  labels = np.array([0, 1, 2, 0])
  perfect = np.log(np.eye(3)[labels] * (1 - 3e-12) + 1e-12)
  metrics = classification_metrics(perfect, labels)
  assert metrics["test_accuracy"] == 1 and metrics["brier"] == pytest.approx(0, abs=1e-9)
  assert metrics["test_mll"] == pytest.approx(0, abs=1e-9) and metrics["ece"] == pytest.approx(
      0, abs=1e-9)
  uniform = np.log(np.full((4, 3), 1 / 3))
  metrics = classification_metrics(uniform, labels)
  assert metrics["test_mll"] == pytest.approx(np.log(1 / 3))
  assert metrics["brier"] == pytest.approx((2 / 3) ** 2 + 2 * (1 / 3) ** 2)   # = 1 - 1/C


def test_ece_is_the_confidence_accuracy_gap():
  """Confidence 0.8 everywhere: ECE is |accuracy - 0.8|; a calibrated predictive has ECE near 0."""
  probabilities = np.tile([0.8, 0.1, 0.1], (10, 1))
  assert expected_calibration_error(probabilities,
                                    np.array([0] * 8 + [1] * 2)) == pytest.approx(0.0)
  assert expected_calibration_error(probabilities,
                                    np.array([0] * 5 + [1] * 5)) == pytest.approx(0.3)
  rng = np.random.default_rng(1)
  confidence = rng.uniform(0.4, 1.0, size=200_000)
  calibrated = np.stack([confidence, (1 - confidence) / 2, (1 - confidence) / 2], axis=1)
  labels = np.where(rng.uniform(size=confidence.size) < confidence, 0, 1)
  assert expected_calibration_error(calibrated, labels) < 0.01


def test_batched_member_prediction_equals_the_whole_set():
  images = np.random.default_rng(2).normal(size=(10, 4)).astype(np.float32)
  weights = tf.constant(np.random.default_rng(3).normal(size=(2, 4, 3)), tf.float32)
  dataset = tf.data.Dataset.from_tensor_slices((images, np.zeros(10))).batch(3)
  members = predict_member_log_probabilities(lambda x: tf.einsum("bi,mio->mbo", x, weights),
                                             dataset)
  logits = tf.einsum("bi,mio->mbo", images, weights)
  np.testing.assert_allclose(members, tf.nn.log_softmax(logits).numpy(), rtol=1e-5, atol=1e-6)
  # The predictive of the member log-probabilities is the predictive of the logits.
  np.testing.assert_allclose(predictive_log_probabilities(members).numpy(),
                             predictive_log_probabilities(logits).numpy(), rtol=1e-5, atol=1e-6)
  # One model's [N, C] logits are one member.
  single = predict_member_log_probabilities(lambda x: tf.matmul(x, weights[0]), dataset)
  np.testing.assert_allclose(single, members[:1], rtol=1e-5, atol=1e-6)


def test_member_metrics_average_the_members_own_scores():
  labels = np.array([0, 1])
  # Member 0 is right on both examples with probability 0.8; member 1 wrong on both (0.2 on the
  # label).
  right = np.log([[0.8, 0.2], [0.2, 0.8]])
  wrong = np.log([[0.2, 0.8], [0.8, 0.2]])
  metrics = member_metrics(np.stack([right, wrong]), labels)
  assert metrics["member_test_mll"] == pytest.approx(0.5 * (np.log(0.8) + np.log(0.2)))
  assert metrics["member_test_accuracy"] == pytest.approx(0.5)
  # Their mixture is uniform: the predictive's MLL log 0.5 is above the members' mean (Jensen).
  mixture = classification_metrics(
      predictive_log_probabilities(np.stack([right, wrong])).numpy(), labels)
  assert mixture["test_mll"] == pytest.approx(np.log(0.5))
  assert mixture["test_mll"] > metrics["member_test_mll"]
  with pytest.raises(ValueError, match=r"shape \(2, 2\) do not match 2 labels"):
    member_metrics(right, labels)


def test_mismatched_labels_are_an_error():
  with pytest.raises(ValueError, match="do not match 3 labels"):
    classification_metrics(np.zeros((4, 2)), np.zeros(3))
