"""methods.trainers.vogn: VOGN's per-example terms and its fixed point on Bayesian linear
regression."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from auxiliary_sampling.layers import Conv2DFlipout, DenseReparameterization, FlattenImage
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import mean_field_parameters
from auxiliary_sampling.predictive import gaussian_log_likelihood
from methods.trainers.gaussian_head import HomoscedasticNoise, gaussian_head_log_likelihood
from methods.trainers.vogn import VognSettings, VognTrainer, vogn_loop
from common.seeding import seed_everything

NOISE_SCALE = 0.5
PRIOR_PRECISION = 4.0


def _linear_regression_data(num_examples=512, num_features=3, seed=0, data_noise=NOISE_SCALE):
  rng = np.random.default_rng(seed)
  inputs = rng.normal(size=(num_examples, num_features)).astype(np.float32)
  inputs *= np.array([1.0, 0.5, 2.0], np.float32)[:num_features]
  weights = np.array([1.0, -2.0, 0.5], np.float32)[:num_features]
  labels = inputs @ weights + data_noise * rng.normal(size=num_examples).astype(np.float32)
  return inputs, labels[:, None]


def _known_noise_log_likelihood(labels, outputs):
  return gaussian_log_likelihood(labels[..., 0], outputs[..., 0], NOISE_SCALE)


def _linear_model():
  return tf_keras.Sequential([DenseReparameterization(
      1, use_bias=False, kernel_initializer="zeros", trainable_prior_scale=False,
      prior_scale=PRIOR_PRECISION ** -0.5)])


@pytest.mark.parametrize("tempering", [1.0, 0.1])
def test_gauss_newton_fixed_point_is_the_exact_mean_field_optimum(tempering):
  """Bayesian linear regression with a Gaussian prior: the optimum of the tempered ELBO
  E_q[log p(D|w)] - tau KL(q || p) (tau = 1: the ELBO; 0.1: the blog's warm start) has precision
  diag(X'X) / (tau s^2) + delta and mean (X'X / s^2 + tau delta I)^-1 X'y / s^2.
  Catches a VOGN whose prior term, N scaling or sigma^2 = tau / (N (s + delta~)) is off (a
  dropped N or delta moves sigma by orders of magnitude, a wrong delta~ in the mean's step
  shifts mu), and, at tau = 0.1, tau left out of sigma^2 (scales sqrt(10) too wide), tau
  dividing the prior instead of weighting it, or tau missing from the mean's prior term."""
  seed_everything(0)
  inputs, labels = _linear_regression_data()
  model = _linear_model()
  trainer = VognTrainer(
      model, inputs, labels, _known_noise_log_likelihood,
      settings=VognSettings(curvature="gauss_newton", momentum=0.5, tempering=tempering),
      learning_rate=0.05, batch_size=512, steps_per_checkpoint=4000)
  trainer.train(4000)
  trainer.learning_rate = type(trainer.learning_rate)(0.002)
  locs = []
  for _ in range(20):
    trainer.train(int(trainer.step.numpy()) + 100)
    locs.append(model.layers[0].kernel.posterior_loc.numpy()[:, 0])
  gram = inputs.T @ inputs / NOISE_SCALE**2
  exact_mean = np.linalg.solve(gram + tempering * PRIOR_PRECISION * np.eye(3),
                               inputs.T @ labels[:, 0] / NOISE_SCALE**2)
  exact_scale = 1.0 / np.sqrt(np.diag(gram) / tempering + PRIOR_PRECISION)
  scale = model.layers[0].kernel.posterior_scale.numpy()[:, 0]
  np.testing.assert_allclose(scale, exact_scale, rtol=0.01)
  # Each mean hovers about its optimum by a fraction of its own sigma (weight noise): measured
  # over 8 noise seeds, the 20-snapshot average stays within 0.09 sigma_i of it.
  assert np.all(np.abs(np.mean(locs, axis=0) - exact_mean) < 0.15 * exact_scale)


def test_damping_divides_the_means_step_and_nothing_else():
  """External damping gamma is added to s in the denominator of the mean's step only (the blog's
  item 6): from the same start and draws, one step with gamma moves each mean by
  (s + delta~) / (s + delta~ + gamma) of the undamped step, and leaves s and the scales as they
  are. Catches gamma ignored, added to sigma^2's denominator too, or put in the numerator."""
  damping = 3.0
  steps, curvatures, scales = [], [], []
  for gamma in (0.0, damping):
    seed_everything(0)
    inputs, labels = _linear_regression_data()
    model = _linear_model()
    trainer = VognTrainer(
        model, inputs, labels, _known_noise_log_likelihood,
        settings=VognSettings(curvature="gauss_newton", momentum=0.5, damping=gamma),
        learning_rate=0.05, batch_size=512)
    start = model.layers[0].kernel.posterior_loc.numpy()[:, 0].copy()
    trainer.train(1)
    steps.append(model.layers[0].kernel.posterior_loc.numpy()[:, 0] - start)
    curvatures.append(trainer.loop.update.optimizer.curvatures[0].numpy()[:, 0])
    scales.append(model.layers[0].kernel.posterior_scale.numpy()[:, 0])
  np.testing.assert_allclose(curvatures[1], curvatures[0], rtol=1e-6)
  np.testing.assert_allclose(scales[1], scales[0], rtol=1e-6)
  undamped = curvatures[0] + PRIOR_PRECISION / len(inputs)
  assert np.all(np.abs(steps[0]) > 1e-3)
  np.testing.assert_allclose(steps[1] / steps[0], undamped / (undamped + damping), rtol=1e-4)


def _empirical_fisher_fixed_point(inputs, labels):
  """Where Algorithm 1's VOGN (squared per-example gradients) settles on linear regression with
  known noise s: its mean step sees the expected gradient, linear in w, so the mean is the exact
  posterior mean; its curvature is E_q[mean_i g_i^2] = mean_i x_ij^2 (r_i^2 + sum_k x_ik^2
  sigma_k^2) / s^4 with residuals r = y - X mu, and sigma_j^2 = 1 / (N curvature_j + delta),
  iterated to the fixed point."""
  gram = inputs.T @ inputs / NOISE_SCALE**2
  mean = np.linalg.solve(gram + PRIOR_PRECISION * np.eye(len(gram)),
                         inputs.T @ labels[:, 0] / NOISE_SCALE**2)
  residuals = labels[:, 0] - inputs @ mean
  variance = np.ones(len(gram))
  for _ in range(200):
    spread = residuals**2 + inputs**2 @ variance
    curvature = np.mean(inputs**2 * spread[:, None], axis=0) / NOISE_SCALE**4
    variance = 1.0 / (len(inputs) * curvature + PRIOR_PRECISION)
  return mean, np.sqrt(variance), 1.0 / np.sqrt(np.diag(gram) + PRIOR_PRECISION)


def test_squared_gradient_fixed_point_is_the_empirical_fisher_closed_form():
  """Algorithm 1's default curvature on linear regression whose model assumes half the data's
  noise std: the residuals are twice the assumed noise, so the empirical Fisher is ~4x the
  Gauss-Newton curvature and VOGN's scales settle at ~half the mean-field optimum's, at the
  closed form of `_empirical_fisher_fixed_point`. Catches a curvature from the squared batch-mean
  gradient instead of the mean of per-example squares (near zero at the fixed point: scales
  near the prior's), or the Gauss-Newton term in its place (scales 2x)."""
  seed_everything(0)
  inputs, labels = _linear_regression_data(data_noise=2 * NOISE_SCALE)
  model = _linear_model()
  trainer = VognTrainer(model, inputs, labels, _known_noise_log_likelihood,
                        settings=VognSettings(momentum=0.5), learning_rate=0.05,
                        batch_size=512, steps_per_checkpoint=6000)
  trainer.train(6000)
  exact_mean, fisher_scale, gauss_newton_scale = _empirical_fisher_fixed_point(inputs, labels)
  assert np.all(fisher_scale < 0.6 * gauss_newton_scale)   # the case tells the two apart
  kernel = model.layers[0].kernel
  np.testing.assert_allclose(kernel.posterior_scale.numpy()[:, 0], fisher_scale, rtol=0.02)
  assert np.all(np.abs(kernel.posterior_loc.numpy()[:, 0] - exact_mean) < 0.5 * fisher_scale)


def _mean_field_empirical_bayes_optimum(inputs, labels):
  """The exact joint optimum of mean-field VI with one learned prior variance v on Bayesian
  linear regression: for fixed v the mean-field optimum is the exact posterior mean with
  variances 1 / diag(precision); v = mean(mu^2 + sigma^2) at it; iterated to the fixed point."""
  gram = inputs.T @ inputs / NOISE_SCALE**2
  variance = 1.0
  for _ in range(500):
    precision = gram + np.eye(len(gram)) / variance
    mean = np.linalg.solve(precision, inputs.T @ labels[:, 0] / NOISE_SCALE**2)
    scale = 1.0 / np.sqrt(np.diag(precision))
    variance = np.mean(mean**2 + scale**2)
  return mean, scale, variance


def test_empirical_bayes_prior_reaches_the_joint_mean_field_optimum():
  """With --vogn_prior=empirical_bayes, VOGN (Gauss-Newton, linear regression) settles at the
  exact joint optimum of the mean-field ELBO over the posterior and the prior variance, far
  from the initial prior's 1/4, at the default decay 0.999. Catches an M-step that is never
  applied (v stays 1/4), or one that drifts elsewhere (a decay towards the wrong variable).
  (Here sigma^2 is ~1e-3 of mu^2, so a dropped sigma^2 is the next test's to catch.)"""
  seed_everything(0)
  inputs, labels = _linear_regression_data()
  model = _linear_model()
  settings = VognSettings(curvature="gauss_newton", momentum=0.5, prior="empirical_bayes")
  trainer = VognTrainer(model, inputs, labels, _known_noise_log_likelihood, settings=settings,
                        learning_rate=0.05, batch_size=512, steps_per_checkpoint=4000)
  trainer.train(8000)
  kernel = model.layers[0].kernel
  exact_mean, exact_scale, exact_variance = _mean_field_empirical_bayes_optimum(inputs, labels)
  np.testing.assert_allclose(kernel.prior_variance.numpy().ravel(), exact_variance, rtol=0.02)
  np.testing.assert_allclose(kernel.posterior_scale.numpy()[:, 0], exact_scale, rtol=0.01)
  assert np.all(np.abs(kernel.posterior_loc.numpy()[:, 0] - exact_mean) < 0.5 * exact_scale)


def test_empirical_bayes_step_minimises_the_kl_over_the_prior_variance():
  """The M-step's variance is the minimiser of KL(q || N(0, v)) over v, on a posterior whose
  scales matter (a planted mean(mu^2) alone, or a mean over the wrong axis, moves it off)."""
  seed_everything(1)
  inputs, labels = _linear_regression_data(num_examples=64)
  model = _noisy_regression_network()
  update = vogn_loop(model, inputs, labels, gaussian_head_log_likelihood,
                     VognSettings(prior="empirical_bayes"), batch_size=64).update
  for parameter in update.parameters:
    parameter.posterior_loc.assign(0.3 * tf.random.normal(parameter.posterior_loc.shape))
    parameter.untransformed_posterior_scale.assign(
        tf.random.uniform(parameter.posterior_loc.shape, -1.0, 0.5))
  update.set_empirical_bayes_priors(decay=0.0)
  for parameter in update.parameters:
    best = parameter.prior_variance.numpy().ravel()[0]
    kl = lambda v: float(tf.reduce_sum(tf.square(parameter.posterior_loc) / v
                                       + parameter.posterior_variance / v + np.log(v)))
    assert kl(best) < min(kl(best * 0.97), kl(best * 1.03))


def _empirical_bayes_network_after(prior_decay: float):
  seed_everything(2)
  inputs, labels = _linear_regression_data(num_examples=256)
  model = _noisy_regression_network()
  trainer = VognTrainer(model, inputs, labels, gaussian_head_log_likelihood, learning_rate=0.01,
                        batch_size=64, settings=VognSettings(prior="empirical_bayes",
                                                             prior_decay=prior_decay))
  trainer.train(600)
  return mean_field_parameters(model)


def test_gradual_empirical_bayes_keeps_a_zero_initialised_bias_alive():
  """Why the prior moves at --vogn_prior_decay rather than jumping: at decay 0 the output bias,
  initialised at zero, gets v = mean(mu^2 + sigma^2) ~ its own tiny sigma^2 at the first step,
  a prior precision that pins it at zero for good (the collapse behind energy's -2.4 and naval's
  non-finite refinement); at the default decay its prior stays broad. Catches the default being
  set back to 0 or the decay ignored."""
  pinned_bias = _empirical_bayes_network_after(prior_decay=0.0)[-1]
  assert pinned_bias.prior_variance.numpy().ravel()[0] < 1e-3
  assert np.abs(pinned_bias.posterior_loc.numpy()).max() < 1e-3
  free_bias = _empirical_bayes_network_after(prior_decay=VognSettings().prior_decay)[-1]
  assert free_bias.prior_variance.numpy().ravel()[0] > 0.1


def _loop_terms(objective, inputs, labels, noises, counters):
  """Per example i, at the draw the counters fix: (gradients of -log p_i, of the mean output)."""
  terms = []
  for i in range(len(inputs)):
    for noise, counter in zip(noises, counters):
      noise.counter.assign(counter)
    with tf.GradientTape(persistent=True) as tape:
      outputs = objective.model_outputs(inputs[i:i + 1])
      loss = -objective.log_likelihood_fn(labels[i:i + 1], outputs)[0]
      mean_output = outputs[0, 0]
    terms.append((tape.gradient(loss, objective.locs), tape.gradient(mean_output, objective.locs),
                  float(outputs[0, 1])))
  return terms


@pytest.mark.parametrize("network", ["dense", "convolution"])
def test_batch_terms_are_those_of_a_loop_over_examples(network):
  """The closed-form batch means of the per-example gradients, of their squares and of the
  Gauss-Newton terms equal one GradientTape per example at the same weight draw, for dense and
  (strided, SAME) convolution layers. Catches the batch-mean gradient squared in place of the
  mean of per-example squares (Adam's second moment, not VOGN's) and a convolution's patches
  taken in another order than its kernel's."""
  seed_everything(1)
  rng = np.random.default_rng(1)
  scales = dict(trainable_prior_scale=False, untransformed_scale_init=-3.0)
  if network == "dense":
    inputs = rng.normal(size=(6, 4)).astype(np.float32)
    body = [DenseReparameterization(5, activation="relu", **scales)]
  else:
    inputs = rng.normal(size=(6, 7, 7, 2)).astype(np.float32)
    body = [Conv2DFlipout(3, 3, strides=2, padding="SAME", activation="relu", **scales),
            FlattenImage()]
  labels = rng.normal(size=(6, 1)).astype(np.float32)
  model = tf_keras.Sequential(body + [DenseReparameterization(1, **scales),
                                      HomoscedasticNoise(initial_scale=0.7)])
  for curvature in ("squared_gradients", "gauss_newton"):
    objective = vogn_loop(model, inputs, labels, gaussian_head_log_likelihood,
                          VognSettings(curvature=curvature), batch_size=6).objective
    noises = [layer.noise for layer in model.layers if hasattr(layer, "noise")]
    counters = [noise.counter.numpy() for noise in noises]
    means, curvatures, _, _ = objective.batch_terms(inputs, labels)
    by_example = _loop_terms(objective, inputs, labels, noises, counters)
    for index, (mean, batch_curvature) in enumerate(zip(means, curvatures)):
      gradients = np.stack([g[index] for g, _, _ in by_example])
      np.testing.assert_allclose(mean, gradients.mean(axis=0), rtol=1e-4, atol=1e-6)
      if curvature == "squared_gradients":
        expected = np.square(gradients).mean(axis=0)
      else:   # only the mean output depends on the weights: c_i = (d mean / d mu)^2 / scale^2
        expected = np.mean([np.square(j[index]) / scale**2 for _, j, scale in by_example], axis=0)
      np.testing.assert_allclose(batch_curvature, expected, rtol=1e-4, atol=1e-7)


def _noisy_regression_network():
  """8 ReLU units, fixed priors (as VOGN needs) and a learned noise scale."""
  return tf_keras.Sequential([
      DenseReparameterization(8, activation="relu", trainable_prior_scale=False),
      DenseReparameterization(1, trainable_prior_scale=False),
      HomoscedasticNoise(initial_scale=1.0)])


def _vogn_trainer(settings: LoopSettings, mc_samples: int = 2):
  """VOGN (seed 3) of `_noisy_regression_network` on 256 examples, built, not yet trained."""
  seed_everything(3)
  inputs, labels = _linear_regression_data(num_examples=256)
  model = _noisy_regression_network()
  trainer = VognTrainer(model, inputs, labels, gaussian_head_log_likelihood, learning_rate=0.01,
                        batch_size=64, settings=VognSettings(mc_samples=mc_samples),
                        loop_settings=settings)
  model(inputs[:1])
  return model, trainer


def _vogn_trace(settings: LoopSettings, mc_samples: int = 2) -> np.ndarray:
  return _vogn_trainer(settings, mc_samples)[1].train(130).trace


def _posterior_values(model) -> list[np.ndarray]:
  return [v.numpy().copy() for p in mean_field_parameters(model)
          for v in (p.posterior_loc, p.untransformed_posterior_scale)]


@pytest.fixture(scope="module")
def run_drawing_inside():
  """600 steps of `_vogn_trainer` drawing its noise inside each step (the default loop), read by
  two tests (one traced loop instead of two): the posterior's means and scales before and
  after, the noise scale after, and the trace. Copies only: nothing trains it further."""
  model, trainer = _vogn_trainer(LoopSettings())
  before = _posterior_values(model)
  trace = trainer.train(600).trace
  return before, _posterior_values(model), float(model.layers[-1].noise_scale.numpy()[0]), trace


def test_every_mean_and_scale_moves_and_the_noise_scale_learns(run_drawing_inside):
  """VOGN drives the posterior of every mean-field parameter (a parameter left out of `locs`
  would keep its initial mean) and Adam the noise scale; the ELBO rises."""
  before, after, noise_scale, trace = run_drawing_inside
  for old, new in zip(before, after):
    assert np.all(old != new)
  assert noise_scale < 0.9   # from 1.0 towards the data's 0.5
  assert np.mean(trace[-50:]) > np.mean(trace[:50]) + 100


def test_vogn_runs_on_noise_drawn_ahead_and_compiled_with_xla(run_drawing_inside):
  """VOGN steps take their weight draws (mc_samples per step) from chunks, plainly and under XLA
  on the same numbers, and still learn. Catches VOGN's step-plan recording calling another
  method of the same name as the loop's forward pass (a TypeError at the first chunk)."""
  plain = _vogn_trace(LoopSettings(noise_chunk_steps=50))
  xla = _vogn_trace(LoopSettings(jit_compile=True, noise_chunk_steps=50))
  np.testing.assert_allclose(xla, plain, rtol=1e-4)
  assert np.mean(plain[-30:]) > np.mean(plain[:30]) + 100
  # Other numbers, same estimator: the same run drawing inside its steps (its first 130).
  assert not np.array_equal(plain, run_drawing_inside[3][:130])


@pytest.mark.parametrize("name, value", [("momentum", 1.0), ("curvature_decay", -0.1),
                                         ("tempering", 0.0), ("damping", -1.0),
                                         ("mc_samples", 0), ("curvature", "hessian"),
                                         ("prior", "learned"), ("prior_decay", 1.0)])
def test_settings_out_of_range_are_refused(name, value):
  with pytest.raises(ValueError, match=f"VOGN {name}="):
    VognSettings(**{name: value})


def test_speed_benchmark_times_vi_and_vogn_on_the_uci_network():
  from benchmarks import vogn_speed
  for trainer in vogn_speed.TRAINERS:
    row = vogn_speed.measure("uci", trainer, steps=20)
    assert row["ms_per_step"] > 0 and row["warm_up_seconds"] > 0
