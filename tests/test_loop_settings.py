"""The training loop with the noise drawn ahead in chunks, plain or compiled by XLA."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop
from common.seeding import seed_everything


def _data(n=300):
  rng = np.random.default_rng(0)
  inputs = rng.normal(size=[n, 5]).astype(np.float32)
  return inputs, (np.tanh(inputs[:, :1]) + 0.2 * rng.normal(size=[n, 1])).astype(np.float32)


def _log_likelihood(labels, outputs):
  return -0.5 * tf.square((labels[..., 0] - outputs[..., 0]) / 0.3)


def _loop(settings: LoopSettings, num_members=None, one_example=False) -> TrainingLoop:
  """The same network, initial posterior and seeds whatever the settings (`one_example`: every
  row of the data is the first example)."""
  seed_everything(0)
  inputs, labels = _data()
  if one_example:
    inputs, labels = (np.repeat(data[:1], len(data), axis=0) for data in (inputs, labels))
  # Wide posteriors: estimates that differ by far more than float32's resolution.
  scale_init = -1.0 if one_example else -7.0
  model = tf_keras.Sequential([
      DenseReparameterization(16, activation="relu", num_members=num_members,
                              untransformed_scale_init=scale_init),
      DenseReparameterization(1, num_members=num_members, untransformed_scale_init=scale_init)])
  model(inputs[:1])
  return TrainingLoop(ElboObjective(model, _log_likelihood),
                      GradientUpdate(Adam(model.trainable_variables)),
                      UniformBatches(inputs, labels, 64), data_seed=5, loop_settings=settings)


@pytest.fixture(scope="module")
def chunked():
  """A function returning the module's loop drawn ahead in chunks of 50 as a fresh one starts:
  every variable its steps change (weights, noise streams, Adam's moments, the batch counter)
  set back to its initial value. The loop is traced once for every test that needs these
  settings, not once per test (each trace of its steps costs seconds)."""
  loop = _loop(LoopSettings(noise_chunk_steps=50))
  initial = [variable.numpy() for variable in loop.variables]

  def fresh() -> TrainingLoop:
    for variable, value in zip(loop.variables, initial):
      variable.assign(value)
    return loop
  return fresh


@pytest.fixture(scope="module")
def plain(chunked):
  """The ELBO trace of 130 steps in one call, drawn ahead in chunks of 50, from a fresh loop."""
  return chunked().maximize(130, 1e-2)


def test_xla_chunks_equal_plain_chunks_and_calls_split_at_chunks_equal_one_call(plain, chunked):
  """XLA runs the plain chunk's steps on the same numbers (to round-off), including a partial
  last chunk; and 100 + 30 steps in two calls equal 130 in one when the split is at a chunk
  boundary, which is what makes a checkpointed run resume to the uninterrupted result."""
  xla = _loop(LoopSettings(jit_compile=True, noise_chunk_steps=50)).maximize(130, 1e-2)
  np.testing.assert_allclose(xla, plain, rtol=1e-4)
  split = chunked()
  np.testing.assert_array_equal(np.concatenate([split.maximize(100, 1e-2),
                                                split.maximize(30, 1e-2)]), plain)


def test_a_run_of_no_steps_draws_nothing_and_the_next_chunk_is_drawn_as_before(plain, chunked):
  """Each chunk's numbers are drawn while the chunk before it runs. Catches a draw made past the
  last chunk, or for a run of 0 steps (the bandit's refinement before its first observation):
  either moves the streams, and the next run would see other numbers than a fresh one."""
  after_nothing = chunked()
  after_nothing.maximize(0, 1e-2)
  np.testing.assert_array_equal(after_nothing.maximize(130, 1e-2), plain)


@pytest.mark.parametrize("num_members", [None, 3])
def test_a_model_first_traced_by_the_step_plan_records_each_draw_once(num_members):
  """A Sequential called only eagerly before (as a refiner's members are) is first called in a
  graph by the step plan's trace; Keras then also calls its layers in a scratch graph to infer
  its shape. With per_batch noise those calls drew too, and the plan held every draw twice: the
  first step stopped ("used 4 of 8 recorded draws", a per_batch refinement prepared before its
  ELBO estimate). Planted: the plan recorded without its graph (`recorded_draws()`), or with the
  scratch graph counted as part of the step's (it is built inside it), fails here."""
  loop = _loop(LoopSettings(noise_chunk_steps=10), num_members)
  loop.objective.weight_noise = "per_batch"
  trace = loop.maximize(12, 1e-2)
  assert np.all(np.isfinite(trace)) and len(trace) == 12
  # Two layers, a kernel and a bias each: one weight draw per tensor and step.
  assert len(loop.step_plan[0]) == 4


@pytest.mark.parametrize("num_members", [None, 3])
def test_drawn_ahead_noise_gives_every_step_its_own_draw_from_the_same_estimator(num_members):
  """At learning rate 0 each step's ELBO estimate is an independent draw of the same minibatch
  estimator, whether the step draws its noise or takes it from a chunk: consecutive ones differ,
  and mean and spread agree with the steps that draw inside. The data are copies of one example,
  so that only the weight noise varies between steps. Catches a chunk whose steps reuse one row
  of the draws (estimates repeat within the chunk), and draws made for the wrong shape or stream
  (the mean or spread moves)."""
  inside = _loop(LoopSettings(), num_members, one_example=True).maximize(400, 0.0)
  ahead = _loop(LoopSettings(noise_chunk_steps=100), num_members,
                     one_example=True).maximize(400, 0.0)
  assert np.all(np.diff(ahead, axis=0) != 0)
  for member in range(1 if num_members is None else num_members):
    a, b = (trace.reshape(len(trace), -1)[:, member] for trace in (inside, ahead))
    standard_error = np.sqrt((a.var() + b.var()) / len(a))
    assert abs(a.mean() - b.mean()) < 4 * standard_error
    assert b.std() == pytest.approx(a.std(), rel=0.2)


@pytest.mark.parametrize("settings,message", [
    (dict(noise_chunk_steps=-1), "noise_chunk_steps=-1 is out of range"),
    (dict(noise_chunk_steps=10_001), "noise_chunk_steps=10001 is out of range"),
    (dict(jit_compile=True), "jit_compile needs the noise drawn ahead"),
])
def test_bad_loop_settings_are_refused(settings, message):
  with pytest.raises(ValueError, match=message):
    LoopSettings(**settings)
