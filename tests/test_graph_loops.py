"""The library's compiled functions run without AutoGraph: loops, layers, a whole refinement."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tensorflow.python.autograph.impl import api as autograph_api

from auxiliary_sampling.graph_loops import counted_loop, graph_function, no_autograph
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.refine import refine
from auxiliary_sampling.schedule import AuxiliarySchedule
from methods.trainers.vi import train_mean_field


def test_counted_loop_runs_its_body_a_tensor_number_of_times():
  @graph_function
  def sum_and_count(n):
    return counted_loop(n, lambda i, total, count: (total + i, count + 1),
                        (tf.constant(0), tf.constant(0)))
  for n in (0, 1, 7):
    total, count = sum_and_count(tf.constant(n))
    assert (int(total), int(count)) == (n * (n - 1) // 2, n)


def test_graph_function_traces_python_control_flow_as_written():
  """Catches AutoGraph left on: it would turn the `if` into a tf.cond and trace without error."""
  @graph_function
  def branching(x):
    if tf.reduce_sum(x) > 0:
      return x
    return -x
  with pytest.raises(TypeError, match="tf.Tensor"):
    branching(tf.ones([2]))


@pytest.fixture
def conversions(monkeypatch):
  """Counts the functions AutoGraph converts (the private hook every conversion passes)."""
  converted = []
  original = autograph_api._convert_actual

  def counting(entity, program_ctx):
    converted.append(getattr(entity, "__qualname__", repr(entity)))
    return original(entity, program_ctx)
  monkeypatch.setattr(autograph_api, "_convert_actual", counting)
  return converted


class _Doubling(tf_keras.layers.Layer):
  @no_autograph
  def call(self, inputs):
    return 2.0 * inputs


class _TrainingFlag(tf_keras.layers.Layer):
  @no_autograph
  def call(self, inputs, training=None):
    return inputs * (2.0 if training else 3.0)


def test_no_autograph_keeps_keras_from_converting_a_call_and_keeps_its_signature(conversions):
  """Catches Keras converting the calls anyway when it traces them to build a model, and a
  wrapper that hides the `training` argument from Keras (which then passes it to every call)."""
  model = tf_keras.Sequential([_Doubling(), _TrainingFlag()])
  assert float(model(tf.ones([1, 1]), training=True)[0, 0]) == 4.0
  assert float(graph_function(lambda x: model(x, training=False))(tf.ones([1, 1]))[0, 0]) == 6.0
  assert conversions == []


@pytest.mark.parametrize("settings", [LoopSettings(),
                                      LoopSettings(jit_compile=True, noise_chunk_steps=20)])
def test_training_and_refining_a_network_converts_nothing(conversions, settings):
  """Catches a new `tf.function` with AutoGraph, or a layer `call` without `no_autograph`, in the
  path every binary runs: converting the UCI network's functions cost ~2 s of each Boston run."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=[64, 3]).astype(np.float32)
  y = (x @ np.array([[1.0], [-1.0], [0.5]])).astype(np.float32)

  def model_fn(num_members=None):
    return tf_keras.Sequential([
        DenseReparameterization(8, activation="relu", num_members=num_members),
        DenseReparameterization(1, num_members=num_members)])

  def log_likelihood(labels, outputs):
    return -0.5 * tf.square(labels[..., 0] - outputs[..., 0])
  model = model_fn()
  train_mean_field(model, x, y, log_likelihood, num_steps=40, learning_rate=1e-2, batch_size=16,
                   loop_settings=settings)
  result = refine(model_fn, model, x, y, log_likelihood, num_samples=2,
                  schedule=AuxiliarySchedule.geometric(0.5, 2), steps_per_auxiliary=20,
                  batch_size=16, elbo_batch_size=32, loop_settings=settings)
  assert np.all(np.isfinite(result.elbo_aux))
  assert conversions == []
