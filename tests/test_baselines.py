"""Baselines: checkpointed VI (resume, summaries), MNF's bound pieces, deep ensembles."""
import dataclasses
import glob
import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.noise import box_muller_normal
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_loop import TrainingLoop
from methods.trainers import coupling_flow
from methods.trainers import deep_ensemble
from methods.trainers import mnf
from runner.config import MethodConfig
from methods.trainers.learning_rate import LearningRateSchedule
from runner.dispatch import train_method
from methods import registry
from methods import network_kinds
from methods.registry import Networks
from methods.trainers import training
from methods.trainers.training import CheckpointedTraining
from methods.trainers.vi import MeanFieldTrainer
from methods.trainers.gaussian_head import HomoscedasticNoise, gaussian_head_log_likelihood

tfd = tfp.distributions


def _regression_data(num_examples=120, dimension=3, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=[num_examples, dimension]).astype(np.float32)
  y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=[num_examples, 1])).astype(np.float32)
  return x, y


def _vi_network():
  return tf_keras.Sequential([
      DenseReparameterization(8, activation="relu"),
      DenseReparameterization(1),
      HomoscedasticNoise()
  ])


def _trainer(seed=0):
  x, y = _regression_data()
  tf.keras.utils.set_random_seed(seed)
  return MeanFieldTrainer(_vi_network(), x, y, gaussian_head_log_likelihood, batch_size=32,
                          seed=seed, steps_per_checkpoint=40, summary_every=10)


def test_interrupted_training_resumes_to_the_same_state(tmp_path):
  uninterrupted = _trainer()
  full = uninterrupted.train(120, checkpoint_dir=str(tmp_path / "a"))
  first = _trainer()
  first.train(80, checkpoint_dir=str(tmp_path / "b"))
  resumed = _trainer()   # a fresh process: new model, new optimiser
  result = resumed.train(120, checkpoint_dir=str(tmp_path / "b"))
  assert result.resumed_from_step == 80 and full.resumed_from_step == 0
  np.testing.assert_allclose(result.trace, full.trace, rtol=1e-5)
  for a, b in zip(uninterrupted.loop.objective.model.variables,
                  resumed.loop.objective.model.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7, err_msg=a.name)
  with pytest.raises(ValueError, match="at step 120, beyond the requested 100 steps"):
    _trainer().train(100, checkpoint_dir=str(tmp_path / "b"))


def test_a_learning_rate_schedule_steps_down_at_its_boundaries_and_survives_a_resume(tmp_path):
  """Catches: a rate read once per chunk that straddles a boundary, a resume that restarts the
  schedule (the rate must follow the step count, not the process)."""
  schedule = LearningRateSchedule(1e-2, boundaries=(30, 50), factors=(0.1, 0.01))
  assert [schedule.rate(s) for s in (0, 29, 30, 49, 50, 99)] == pytest.approx(
      [1e-2, 1e-2, 1e-3, 1e-3, 1e-4, 1e-4])
  assert [schedule.steps_at_this_rate(s) for s in (0, 35, 50)] == [30, 15, None]
  by_hand = _trainer()
  for steps, rate in ((30, 1e-2), (20, 1e-3), (20, 1e-4)):
    by_hand.loop.maximize(steps, rate)
  scheduled = _trainer()
  scheduled.learning_rate = schedule
  scheduled.train(45, checkpoint_dir=str(tmp_path))   # stops mid-schedule
  resumed = _trainer()
  resumed.learning_rate = schedule
  resumed.train(70, checkpoint_dir=str(tmp_path))
  for a, b in zip(by_hand.loop.objective.model.variables, resumed.loop.objective.model.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7, err_msg=a.name)
  for bad in (dict(boundaries=(5, 5), factors=(1.0, 1.0)), dict(boundaries=(5,), factors=()),
              dict(boundaries=(0,), factors=(0.1,))):
    with pytest.raises(ValueError):
      LearningRateSchedule(1e-3, **bad)


def test_training_logs_elbo_likelihood_and_kl_and_learns_the_noise(tmp_path):
  trainer = _trainer()
  result = trainer.train(605, summary_dir=str(tmp_path))
  assert glob.glob(str(tmp_path / "events.out.tfevents.*"))
  summaries = tf.compat.v1.train.summary_iterator(
      glob.glob(str(tmp_path / "events.out.tfevents.*"))[0])
  written, metadata = {}, {}
  for event in summaries:
    for value in event.summary.value:
      written.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
      metadata.setdefault(value.tag, value.metadata)
  assert set(written) == {"elbo", "kl", "expected_log_likelihood"}
  # Written without tensorboard's tf.summary.scalar: its marks must be what that writes, or
  # TensorBoard would not show them as scalars.
  with tf.summary.create_file_writer(str(tmp_path / "reference")).as_default():
    tf.summary.scalar("reference", 1.0, step=0)
  reference = [value.metadata for event in tf.compat.v1.train.summary_iterator(
      glob.glob(str(tmp_path / "reference" / "events.out.tfevents.*"))[0])
      for value in event.summary.value]
  assert reference and all(mark == reference[0] for mark in metadata.values())
  # Every summary_every-th step (10) and the last one of a chunk (605, of a 5-step chunk);
  # written in one graph call per chunk, whose loop would silently drop its summary ops or
  # shift the steps without this check.
  steps = np.append(np.arange(10, 601, 10), 605)
  for tag, expected in [("elbo", result.trace), ("kl", result.kl_trace),
                        ("expected_log_likelihood", result.trace + result.kl_trace)]:
    assert sorted(written[tag]) == list(steps), tag
    np.testing.assert_allclose([written[tag][step] for step in steps], expected[steps - 1],
                               rtol=1e-5, err_msg=tag)
  assert result.trace[-50:].mean() > result.trace[:50].mean() + 20
  noise = trainer.loop.objective.model.layers[-1].noise_scale.numpy()[0]
  assert noise < 0.8   # falling from its initial 1.0 towards the data's 0.1


@pytest.mark.parametrize("chunks, expected", [
    ([(100, 3.0), (100, 1.0), (100, 1.0)], 2.0),
    ([(100, 3.0), (100, 1.0), (10, 0.5)], 2.0),   # a short last chunk: per-call costs, not pace
    ([(100, 0.9), (100, 1.0)], 0.0),
    ([(100, 3.0)], None), ([(100, 3.0), (50, 0.5)], None), ([], None)])
def test_setup_seconds_is_the_first_chunks_time_beyond_the_later_pace(chunks, expected):
  assert training._setup_seconds(chunks) == expected


def test_a_non_finite_objective_stops_training_with_a_clear_error(tmp_path):
  x, y = _regression_data()
  model = _vi_network()
  model(x[:1])
  loop = TrainingLoop(ElboObjective(model, lambda labels, outputs: outputs[..., 0] / 0.0 * 0.0),
                      GradientUpdate(Adam(model.trainable_variables)), UniformBatches(x, y, 16))
  with pytest.raises(FloatingPointError, match="non-finite ELBO at step 1 of 5"):
    CheckpointedTraining(loop, 1e-3).train(5, checkpoint_dir=str(tmp_path))
  assert not glob.glob(str(tmp_path / "*.index"))


# MNF ----------------------------------------------------------------------------------------------


def _flow(dimension=5, steps=2, hidden=7, seed=1):
  flow = coupling_flow.MaskedCouplingFlow(dimension, steps, hidden, np.random.default_rng(seed))
  for variable in flow.trainable_variables:   # nonzero biases so every term matters
    variable.assign(variable + 0.3 * tf.random.stateless_normal(variable.shape, [seed, 7]))
  return flow


def test_coupling_masks_are_fresh_per_step_and_never_trivial():
  flow = _flow(dimension=6, steps=6)
  masks = np.stack(flow.masks)
  assert np.all((masks.sum(1) > 0) & (masks.sum(1) < 6))
  assert len({tuple(mask) for mask in masks}) > 1


def test_flow_log_determinant_matches_the_jacobian_and_tfp_bijectors():
  flow = _flow()
  z = tf.random.stateless_normal([4, 5], [0, 1])
  with tf.GradientTape() as tape:
    tape.watch(z)
    output, log_det = flow.forward(z)
  jacobian = tape.batch_jacobian(output, z)
  np.testing.assert_allclose(log_det, tf.linalg.slogdet(jacobian)[1], rtol=1e-4, atol=1e-5)
  bijector = flow.as_bijector()
  np.testing.assert_allclose(bijector.forward(z), output, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bijector.forward_log_det_jacobian(z, event_ndims=1), log_det,
                             rtol=1e-5, atol=1e-6)


def _built_dense(use_flows=True, units=4, inputs=5, seed=3):
  layer = mnf.DenseMNF(units, use_flows=use_flows, seed=seed, hidden_units_q=6, hidden_units_r=6)
  layer(tf.zeros([1, inputs]))
  return layer


def test_log_q_of_z_is_the_flow_pushforward_density():
  layer = _built_dense()
  z_t, log_q = layer.sample_z(tf.constant([3]))
  base = tfd.MultivariateNormalDiag(layer.z_loc, layer.z_scale)
  reference = tfd.TransformedDistribution(base, layer.flow_q.as_bijector()).log_prob(z_t)
  np.testing.assert_allclose(log_q, reference, rtol=1e-4, atol=1e-4)


def test_bound_pieces_against_direct_computation():
  """KL(q(W|z)||p(W)) against tfp, log r(z|W) against its formula with the same draws."""
  layer = _built_dense(use_flows=False)
  layer.bias_loc.assign(tf.fill(layer.bias_loc.shape, 0.3))
  z = tf.constant([0.9, 1.1, 1.0, 0.8, 1.2])
  prior = tfd.Normal(0.0, 1.0)
  kernel = tfd.Normal(z[:, None] * layer.kernel_loc, layer.kernel_scale)
  bias = tfd.Normal(layer.bias_loc, layer.bias_scale)
  kl_direct = (tf.reduce_sum(tfd.kl_divergence(kernel, prior))
               + tf.reduce_sum(tfd.kl_divergence(bias, prior)))
  np.testing.assert_allclose(layer.weight_kl(z), kl_direct, rtol=1e-5)
  counter = layer.noise.counter.numpy()
  log_r = layer.log_reverse(z)
  noise = box_muller_normal([4], tf.stack([layer.noise.seed, tf.constant(counter + 1, tf.int64)]))
  weights_mean = tf.linalg.matvec(tf.transpose(z[:, None] * layer.kernel_loc),
                                  layer.reverse_projection)
  weights_variance = tf.linalg.matvec(tf.transpose(tf.square(layer.kernel_scale)),
                                      tf.square(layer.reverse_projection))
  summary = tf.reduce_mean(tf.tanh(weights_mean + tf.sqrt(weights_variance) * noise))
  precision = tf.exp(layer.reverse_log_precision_weights * summary)
  expected = tf.reduce_sum(
      tfd.Normal(layer.reverse_mean_weights * summary, tf.math.rsqrt(precision)).log_prob(z))
  np.testing.assert_allclose(log_r, expected, rtol=1e-5)


def test_without_flows_and_noise_mnf_is_a_gaussian_mean_field_layer():
  """z fixed at 1: outputs and KL equal those of DenseReparameterization.

  No flows, zero z variance.
  """
  layer = _built_dense(use_flows=False)
  layer.z_loc.assign(tf.ones([5]))
  layer.untransformed_z_scale.assign(tf.fill([5], -30.0))
  reference = DenseReparameterization(4)
  reference(tf.zeros([1, 5]))
  reference.kernel.posterior_loc.assign(layer.kernel_loc)
  reference.kernel.untransformed_posterior_scale.assign(layer.untransformed_kernel_scale)
  reference.bias.posterior_loc.assign(layer.bias_loc + 0.2)
  layer.bias_loc.assign(layer.bias_loc + 0.2)
  reference.bias.untransformed_posterior_scale.assign(layer.untransformed_bias_scale + 3.0)
  layer.untransformed_bias_scale.assign(layer.untransformed_bias_scale + 3.0)
  inputs = tf.broadcast_to(tf.constant([[0.5, -1.0, 2.0, 0.3, -0.7]]), [20000, 5])
  ours, theirs = layer(inputs), reference(inputs)
  np.testing.assert_allclose(tf.reduce_mean(ours, 0), tf.reduce_mean(theirs, 0), atol=0.03)
  np.testing.assert_allclose(tf.math.reduce_std(ours, 0), tf.math.reduce_std(theirs, 0), rtol=0.03)
  kl_weights = layer.kl_divergence() - (layer.sample_z(tf.zeros([0], tf.int32))[1] -
                                        layer.log_reverse(layer.z_loc))
  assert abs(float(kl_weights -
                   reference.kl_divergence())) < 1e-2 * float(reference.kl_divergence())


def test_conv_mnf_multiplies_output_channels():
  layer = mnf.Conv2DMNF(3, 3, seed=0, hidden_units_q=5, hidden_units_r=5)
  images = tf.random.stateless_normal([2, 6, 6, 2], [1, 2])
  outputs = layer(images)
  assert outputs.shape == (2, 6, 6, 3)
  layer.untransformed_kernel_scale.assign(tf.fill(layer.kernel_loc.shape, -30.0))
  layer.untransformed_bias_scale.assign(tf.fill([3], -30.0))
  counter = layer.noise.counter.numpy()
  outputs = layer(images)
  z_noise = box_muller_normal([2, 3],
                              tf.stack([layer.noise.seed, tf.constant(counter + 1, tf.int64)]))
  z, _ = layer.flow_q.forward(layer.z_loc + layer.z_scale * z_noise)
  expected = tf.nn.conv2d(images, layer.kernel_loc, 1, "SAME") * z[:, None,
                                                                   None, :] + layer.bias_loc
  np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-4)
  assert np.isfinite(layer.kl_divergence().numpy())


def test_mnf_training_reaches_every_variable_and_improves_the_bound():
  x, y = _regression_data()
  model = tf_keras.Sequential(
      mnf.regression_mnf(8, seed=0, hidden_units_q=6, hidden_units_r=6).layers +
      [HomoscedasticNoise()])
  model(x[:1])
  with tf.GradientTape() as tape:
    loss = -tf.reduce_sum(gaussian_head_log_likelihood(y, model(x))) + mnf.mnf_kl(model)
  gradients = tape.gradient(loss, model.trainable_variables)
  missing = [
      v.name
      for v, g in zip(model.trainable_variables, gradients)
      if g is None or not np.any(g.numpy())
  ]
  assert not missing
  result = mnf.train_mnf(model, x, y, gaussian_head_log_likelihood, num_steps=600, batch_size=32)
  assert result.trace[-50:].mean() > result.trace[:50].mean() + 20
  assert result.kl_trace[-50:].mean() < result.kl_trace[:50].mean()


# Deep ensembles -----------------------------------------------------------------------------------


def test_ensemble_members_start_different_and_match_their_own_layer():
  model = deep_ensemble.regression_ensemble(num_members=3, hidden_units=6, seed=0)
  x = tf.constant(_regression_data()[0][:5])
  outputs = model(x)
  assert outputs.shape == (3, 5, 2)
  kernel = model.layers[0].kernel.numpy()
  assert not np.allclose(kernel[0], kernel[1])
  np.testing.assert_allclose(np.std(kernel, axis=(1, 2)), math.sqrt(2 / 3),
                             rtol=0.5)  # He fan-in of one member
  member = 1
  hidden = tf.nn.relu(x @ kernel[member] + model.layers[0].bias[member])
  raw = hidden @ model.layers[1].kernel[member] + model.layers[1].bias[member]
  np.testing.assert_allclose(outputs[member, :, 0], raw[:, 0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(outputs[member, :, 1]**2, tf.nn.softplus(raw[:, 1]) + 1e-6, rtol=1e-5)


def test_adversarial_examples_increase_the_loss_and_training_fits():
  x, y = _regression_data()
  model = deep_ensemble.regression_ensemble(num_members=2, hidden_units=8, seed=1)
  model(x[:1])
  clean = ElboObjective(model, gaussian_head_log_likelihood, kl_fn=lambda: tf.zeros([2]))
  adversarial = deep_ensemble.AdversarialObjective(
      model, gaussian_head_log_likelihood, lambda: tf.zeros([2]), epsilon=0.1)
  inputs = tf.broadcast_to(x[None], [2] + list(x.shape))
  labels = tf.broadcast_to(y[None], [2] + list(y.shape))
  num_examples = tf.constant(float(len(x)))
  clean_objective = clean.expected_log_likelihood(inputs, labels, num_examples)
  both = adversarial.expected_log_likelihood(inputs, labels, num_examples)
  assert np.all(both < 2 * clean_objective)   # the adversarial term is worse than the clean one
  result = deep_ensemble.train_deep_ensemble(model, x, y, gaussian_head_log_likelihood,
                                             num_members=2, num_steps=800, batch_size=32,
                                             epsilon=0.01)
  assert result.trace.shape == (800, 2)
  assert np.all(result.trace[-50:].mean(0) > result.trace[:50].mean(0) + 50)


@dataclasses.dataclass
class _SteppedConfig(MethodConfig, *registry.configs_of(("vi", "deep_ensemble"))):
  """A benchmark whose learning rate all but stops after step 20 (as ResNet-20's epochs step it)."""

  def learning_rate_schedule(self, num_examples):
    return LearningRateSchedule(self.learning_rate, boundaries=(20,), factors=(1e-12,))


@pytest.mark.parametrize("method", ["vi", "deep_ensemble"])
def test_train_method_follows_the_configs_schedule_and_the_networks_penalty(tmp_path, method):
  """Catches: a trainer given the constant --learning_rate instead of the config's schedule, and a
  network's penalty (ResNet-20's L2) left out of VI's or the ensemble's objective."""
  x, y = _regression_data()

  def kernels(model):
    return [v for v in model.trainable_variables if "kernel" in v.name and "scale" not in v.name]

  def trained(directory, steps, penalty_weight):
    tf.keras.utils.set_random_seed(0)
    networks = Networks(
        builders={network_kinds.MEAN_FIELD: lambda members: _vi_network(),
                  network_kinds.ENSEMBLE:
                  lambda members: deep_ensemble.regression_ensemble(members, hidden_units=8)},
        penalty=lambda model: penalty_weight * tf.add_n(
            [tf.reduce_sum(tf.square(v)) for v in kernels(model)]))
    config = _SteppedConfig(method=method, vi_steps=steps, ensemble_steps=steps, batch_size=32,
                            learning_rate=1e-2, ensemble_members=2)
    run = train_method(config, networks, x, y, gaussian_head_log_likelihood,
                       str(tmp_path / directory))
    return [v.numpy() for v in kernels(run.models[0])]

  after_20 = trained("20", 20, 0.0)
  for kernel_20, kernel_40 in zip(after_20, trained("40", 40, 0.0)):
    np.testing.assert_allclose(kernel_20, kernel_40, atol=1e-6)
  # The unpenalised 20 steps are the run above (same seed and settings): not trained again.
  norms = [sum(float(np.sum(k**2)) for k in kernels)
           for kernels in (after_20, trained("penalised", 20, 1.0))]
  assert norms[1] < 0.9 * norms[0]
