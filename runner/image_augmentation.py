"""Random rotations, shifts and horizontal flips of training images, drawn in the compiled step.

The authors' ResNet code offers Keras's ImageDataGenerator(rotation_range=90,
width_shift_range=0.1, height_shift_range=0.1, horizontal_flip=True): every
training image is rotated by an angle uniform in [-90, 90] degrees about its
centre, shifted by up to a tenth of its width and height, flipped left-right
with probability 1/2, bilinearly resampled, and filled with the nearest edge
pixel. `RandomImageTransform` does the same to each batch inside the training
step: its random numbers come from the step's counter-based seed, drawn for the
global batch and cut to this replica's rows (`batch_shards`), so an augmented
run resumes exactly and 2 replicas see the images one device sees.
"""
from __future__ import annotations

import math

import tensorflow as tf

from auxiliary_sampling.batch_shards import global_rows, local_rows


def transform_matrices(angle: tf.Tensor, shift_x: tf.Tensor, shift_y: tf.Tensor,
                       flip: tf.Tensor, height: int, width: int) -> tf.Tensor:
  """[..., 8] projective maps from output pixel to input pixel (ImageProjectiveTransformV3's).

  The input point of output pixel p is R(angle) (p - c) + c + shift about the
  centre c, then mirrored left-right where `flip` is true; angles in radians,
  shifts in pixels.
  """
  cos, sin = tf.cos(angle), tf.sin(angle)
  centre_x, centre_y = (width - 1) / 2.0, (height - 1) / 2.0
  sign = 1.0 - 2.0 * tf.cast(flip, angle.dtype)
  zeros = tf.zeros_like(angle)
  return tf.stack([
      sign * cos, -sign * sin,
      sign * (-cos * centre_x + sin * centre_y + shift_x) + centre_x,
      sin, cos, -sin * centre_x - cos * centre_y + centre_y + shift_y,
      zeros, zeros], axis=-1)


def apply_transforms(images: tf.Tensor, matrices: tf.Tensor) -> tf.Tensor:
  """Resamples [..., H, W, C] images through [..., 8] maps: bilinear, nearest-edge fill."""
  shape = tf.shape(images)
  flat = tf.reshape(images, tf.concat([[-1], shape[-3:]], 0))
  transformed = tf.raw_ops.ImageProjectiveTransformV3(
      images=flat, transforms=tf.reshape(matrices, [-1, 8]), output_shape=shape[-3:-1],
      fill_value=0.0, interpolation="BILINEAR", fill_mode="NEAREST")
  return tf.reshape(transformed, shape)


class RandomImageTransform:
  """(images [..., B, H, W, C], seed [2] int64) -> the images randomly rotated, shifted, flipped."""

  def __init__(self, max_rotation_degrees: float = 90.0, max_shift: float = 0.1,
               horizontal_flip: bool = True):
    if not 0 <= max_rotation_degrees <= 180 or not 0 <= max_shift < 1:
      raise ValueError(f"max_rotation_degrees={max_rotation_degrees} must be in [0, 180] and "
                       f"max_shift={max_shift} in [0, 1)")
    self.max_rotation = math.radians(max_rotation_degrees)
    self.max_shift = float(max_shift)
    self.horizontal_flip = bool(horizontal_flip)

  def draw(self, batch_shape: tf.Tensor, seed: tf.Tensor, height: int,
           width: int) -> tf.Tensor:
    """[..., B, 8] maps for a batch of `batch_shape` (this replica's rows of the global batch's)."""
    batch_shape = tf.cast(batch_shape, tf.int32)
    local = batch_shape[-1:]
    draw_shape = tf.concat([batch_shape[:-1], global_rows(local), [4]], 0)
    uniform = tf.random.stateless_uniform(draw_shape, seed=seed, minval=-1.0, maxval=1.0)
    uniform = local_rows(uniform, batch_axis=int(uniform.shape.rank) - 2, local_shape=local)
    angle = self.max_rotation * uniform[..., 0]
    shift_x = self.max_shift * width * uniform[..., 1]
    shift_y = self.max_shift * height * uniform[..., 2]
    flip = tf.logical_and(self.horizontal_flip, uniform[..., 3] < 0)
    return transform_matrices(angle, shift_x, shift_y, flip, height, width)

  def __call__(self, images: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    height, width = int(images.shape[-3]), int(images.shape[-2])
    matrices = self.draw(tf.shape(images)[:-3], seed, height, width)
    return apply_transforms(images, matrices)
