"""Data augmentation in the training step: the authors' rotations, shifts and flips, exactly."""
import numpy as np
import tensorflow as tf

from auxiliary_sampling.batch_shards import batch_shard
from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop
from auxiliary_sampling.predictive import categorical_log_likelihood
from runner.image_augmentation import RandomImageTransform, apply_transforms, transform_matrices

IMAGE = tf.reshape(tf.range(7 * 7 * 2, dtype=tf.float32), [1, 7, 7, 2])
ZERO, NO = tf.zeros([1]), tf.constant([False])


def _transformed(angle=0.0, shift_x=0.0, shift_y=0.0, flip=False):
  matrices = transform_matrices(tf.constant([angle]), tf.constant([shift_x]),
                                tf.constant([shift_y]), tf.constant([flip]), 7, 7)
  return apply_transforms(IMAGE, matrices).numpy()[0]


def test_the_identity_flip_rotation_and_shift_are_exact():
  """Catches: a map in the wrong direction (output to input), a centre off by half a pixel."""
  image = IMAGE.numpy()[0]
  np.testing.assert_array_equal(_transformed(), image)
  np.testing.assert_array_equal(_transformed(flip=True), image[:, ::-1])
  np.testing.assert_allclose(_transformed(angle=np.pi / 2), np.rot90(image, 1, axes=(0, 1)),
                             atol=1e-4)
  # A shift of 2 pixels reads 2 columns to the right and repeats the edge (Keras's "nearest").
  np.testing.assert_array_equal(_transformed(shift_x=2.0)[:, :5], image[:, 2:])
  np.testing.assert_array_equal(_transformed(shift_x=2.0)[:, 5:], image[:, 6:7].repeat(2, 1))
  np.testing.assert_array_equal(_transformed(shift_y=-1.0)[1:], image[:-1])


def test_draws_cover_the_authors_ranges_and_follow_the_seed():
  augment = RandomImageTransform()
  seed = tf.constant([3, 4], tf.int64)
  matrices = augment.draw(tf.constant([4000]), seed, 32, 32).numpy()
  np.testing.assert_array_equal(matrices, augment.draw(tf.constant([4000]), seed, 32, 32))
  assert not np.array_equal(matrices, augment.draw(tf.constant([4000]), seed + 1, 32, 32))
  flipped = matrices[:, 0] * matrices[:, 4] < 0    # sign * cos against cos
  angles = np.arctan2(matrices[:, 3], matrices[:, 4])
  assert abs(flipped.mean() - 0.5) < 0.03
  assert np.abs(angles).max() <= np.pi / 2 + 1e-6 and np.abs(angles).max() > 0.98 * np.pi / 2
  # Shifts: up to 0.1 of 32 pixels, read off an unrotated, unflipped map's translation.
  centre = 15.5
  shift_y = matrices[:, 5] + np.sin(angles) * centre + np.cos(angles) * centre - centre
  assert np.abs(shift_y).max() <= 3.2 + 1e-4 and np.abs(shift_y).max() > 3.1


def test_each_replica_draws_its_rows_of_the_global_batch():
  """Catches: replicas drawing the same (or their own) transforms, so 2 replicas != 1 device."""
  augment = RandomImageTransform()
  seed = tf.constant([1, 9], tf.int64)
  whole = augment.draw(tf.constant([3, 8]), seed, 28, 28).numpy()
  halves = []
  for replica in range(2):
    with batch_shard(2, replica):
      halves.append(augment.draw(tf.constant([3, 4]), seed, 28, 28).numpy())
  # Equal draws; the maps' trigonometry may round differently in another vector width.
  np.testing.assert_allclose(np.concatenate(halves, axis=1), whole, rtol=1e-6, atol=1e-5)


class _Logits(tf.Module):
  def __init__(self):
    super().__init__()
    self.kernel = tf.Variable(tf.random.stateless_normal([4, 3], seed=[5, 6]))

  def __call__(self, images, training=None):
    return tf.reshape(images, [-1, 4]) @ self.kernel


def test_the_training_step_sees_the_transformed_batch(num_steps=3):
  """Catches: the transform built but not applied, or applied to the labels' batch order."""
  images = tf.random.stateless_normal([50, 2, 2, 1], seed=[0, 1])
  labels = tf.random.stateless_uniform([50], seed=[0, 2], maxval=3, dtype=tf.int32)

  def trace(data, transform):
    model = _Logits()
    loop = TrainingLoop(
        ElboObjective(model, categorical_log_likelihood, kl_fn=lambda: tf.constant(0.0)),
        GradientUpdate(Adam(model.trainable_variables)), UniformBatches(data, labels, 10),
        input_transform=transform)
    return loop.maximize(num_steps, 0.1)

  squared = trace(images, lambda batch, seed: tf.square(batch))
  np.testing.assert_allclose(squared, trace(tf.square(images), None), rtol=1e-6)
  assert not np.allclose(squared, trace(images, None))
