"""refine(): the ELBO ordering on Bayesian linear regression, vectorisation, bad input."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from scipy.stats import multivariate_normal

from auxiliary_sampling.elbo_estimate import _summed_log_likelihood, estimate_elbo
from auxiliary_sampling.graph_loops import graph_function
from auxiliary_sampling.layers import DenseReparameterization
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import mean_field_parameters
from auxiliary_sampling.refine import Refiner, refine
from auxiliary_sampling.schedule import AuxiliarySchedule
from auxiliary_sampling.stream_seeding import stream_seeds
from auxiliary_sampling.trained_state import load_trained_state
from auxiliary_sampling.training_batches import UniformBatches
from methods.trainers.background import BackgroundWork
from methods.trainers.vi import train_mean_field

NOISE = 1.0


def _linear_regression_data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=[20, 2])
  x[:, 1] = 0.9 * x[:, 0] + 0.3 * x[:, 1]  # correlated inputs -> correlated posterior
  y = x @ np.array([1.0, -0.5]) + NOISE * rng.normal(size=20)
  return x.astype(np.float32), y.astype(np.float32)[:, None]


def _linear_model(num_members=None):
  return tf_keras.Sequential([DenseReparameterization(1, use_bias=False, num_members=num_members,
                                                      trainable_prior_scale=False)])


def _gaussian_log_likelihood(labels, outputs):
  return -0.5 * np.log(
      2 * np.pi * NOISE**2) - 0.5 * tf.square(labels[..., 0] - outputs[..., 0]) / NOISE**2


@pytest.fixture(scope="module")
def linear_regression():
  tf.random.set_seed(0)
  np.random.seed(0)
  x, y = _linear_regression_data()
  precision = x.T.astype(np.float64) @ x / NOISE**2 + np.eye(2)
  covariance = np.linalg.inv(precision)
  mean = covariance @ x.T @ y[:, 0] / NOISE**2
  log_evidence = multivariate_normal(np.zeros(20), NOISE**2 * np.eye(20) + x @ x.T).logpdf(y[:, 0])
  model = _linear_model()
  train_mean_field(model, x, y, _gaussian_log_likelihood, num_steps=3000, learning_rate=1e-2,
                   batch_size=20)
  return dict(x=x, y=y, mean=mean, covariance=covariance, log_evidence=log_evidence, model=model)


def _refined_weights(result, draws_per_member=1):
  kernel = result.model.layers[0].kernel
  loc, scale = kernel.posterior_loc.numpy()[..., 0], kernel.posterior_scale.numpy()[..., 0]
  rng = np.random.default_rng(1)
  return np.concatenate([loc + scale * rng.normal(size=loc.shape) for _ in range(draws_per_member)])


def test_vi_reaches_the_mean_field_optimum(linear_regression):
  lr = linear_regression
  kernel = lr["model"].layers[0].kernel
  # Optimal mean-field Gaussian for a Gaussian posterior: exact mean, variances 1 / precision_ii.
  assert kernel.posterior_loc.numpy()[:, 0] == pytest.approx(lr["mean"], abs=0.05)
  optimal_variance = 1.0 / np.diag(np.linalg.inv(lr["covariance"]))
  assert kernel.posterior_variance.numpy()[:, 0] == pytest.approx(optimal_variance, rel=0.25)


def test_refinement_improves_the_elbo_and_captures_the_covariance(linear_regression):
  lr = linear_regression
  elbo_vi = float(
      estimate_elbo(lr["model"], lr["x"], lr["y"], _gaussian_log_likelihood, num_samples=400))
  results = {}
  for k in (1, 6):
    results[k] = refine(_linear_model, lr["model"], lr["x"], lr["y"], _gaussian_log_likelihood,
                        num_samples=400, schedule=AuxiliarySchedule.geometric(0.5, k),
                        steps_per_auxiliary=300, learning_rates=[1e-2] * k, batch_size=20,
                        seed=k, elbo_num_samples=20)
  for k, result in results.items():
    stderr = result.elbo_aux.std() / np.sqrt(len(result.elbo_aux))
    # ELBO_init <= ELBO_aux <= log p(y | x)  (Proposition 1 and the evidence bound). One
    # auxiliary variable of half the prior variance gains only ~0.03 nats here (0.4 nats of
    # spread per sample), so K = 1 must not fall below VI and K = 6 must rise clearly above it.
    assert result.elbo_aux_estimate > elbo_vi + (3 if k == 6 else -3) * stderr, k
    assert result.elbo_aux_estimate < lr["log_evidence"] + 3 * stderr, k
  assert results[6].elbo_aux_estimate > results[1].elbo_aux_estimate
  exact_correlation = lr["covariance"][0, 1] / np.sqrt(np.prod(np.diag(lr["covariance"])))
  correlations = {k: np.corrcoef(_refined_weights(r).T)[0, 1] for k, r in results.items()}
  # Mean-field has zero correlation; refinement makes the posterior's strong
  # negative correlation appear, more so with more auxiliary variables.
  assert exact_correlation < -0.9
  assert correlations[1] < -0.2
  assert correlations[6] < correlations[1] - 0.15
  assert abs(correlations[6] - exact_correlation) < 0.2
  # The covariance approaches the exact one as K grows (it is not reached: the
  # paper leaves convergence as K -> infinity open).
  kernel = lr["model"].layers[0].kernel
  distance = {
      "mean_field":
          np.linalg.norm(np.diag(kernel.posterior_variance.numpy()[:, 0]) - lr["covariance"])
  }
  for k, result in results.items():
    samples = _refined_weights(result, draws_per_member=5)
    assert samples.mean(0) == pytest.approx(lr["mean"], abs=0.1)
    distance[k] = np.linalg.norm(np.cov(samples.T) - lr["covariance"])
  assert distance["mean_field"] > distance[1] + 0.05 > distance[6] + 0.1


def test_without_optimisation_elbo_aux_equals_the_initial_elbo(linear_regression):
  """Section 3.2: conditioning alone leaves the ELBO unchanged in expectation."""
  lr = linear_regression
  result = refine(_linear_model, lr["model"], lr["x"], lr["y"], _gaussian_log_likelihood,
                  num_samples=4000, schedule=AuxiliarySchedule.geometric(0.7, 3),
                  steps_per_auxiliary=0, batch_size=20, elbo_num_samples=4)
  stderr = result.elbo_aux.std() / np.sqrt(len(result.elbo_aux))
  assert result.elbo_aux_estimate == pytest.approx(result.initial_elbo_estimate,
                                                   abs=4 * stderr + 0.02)
  assert result.trace.shape == (0, 4000)


def _mlp(num_members=None):
  return tf_keras.Sequential([
      DenseReparameterization(8, activation="relu", num_members=num_members),
      DenseReparameterization(1, num_members=num_members)
  ])


def _toy_regression(n=64):
  rng = np.random.default_rng(7)
  x = rng.normal(size=[n, 3]).astype(np.float32)
  return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=[n, 1])).astype(np.float32)


def _seeded_fit(x, y, num_steps, batch_size, **kwargs):
  """An _mlp fitted to (x, y) by `num_steps` VI steps from seeded initial weights (module
  fixtures are made before a test's own seeding)."""
  tf.random.set_seed(0)
  np.random.seed(0)
  trained = _mlp()
  train_mean_field(trained, x, y, _gaussian_log_likelihood, num_steps=num_steps,
                   batch_size=batch_size, **kwargs)
  return trained


@pytest.fixture(scope="module")
def toy_fit():
  """(x, y, trained): _toy_regression() and an _mlp fitted to it by 60 VI steps, made once and
  shared (read only) by the tests that refine a small trained network: each VI fit traces its
  own loop, and what they check does not depend on which fit they start from."""
  x, y = _toy_regression()
  return x, y, _seeded_fit(x, y, num_steps=60, batch_size=32)


# The refinement the vectorised, reused-refiner and prepared-refiner tests compare with: 3
# members of the shared fit, 2 auxiliary variables of 15 steps each, batch 32, seed 3.
FRESH = dict(schedule=AuxiliarySchedule.geometric(0.7, 2), steps_per_auxiliary=15, batch_size=32,
             seed=3)


@pytest.fixture(scope="module")
def fresh_refinement(toy_fit):
  """fresh_refinement(loop, weight_noise): a fresh refine() of the shared fit with FRESH's
  settings, made on first use (each traces its loop) and shared; read only."""
  x, y, trained = toy_fit
  made = {}

  def result(loop: LoopSettings, weight_noise: str = "per_example"):
    if (loop, weight_noise) not in made:
      made[loop, weight_noise] = refine(_mlp, trained, x, y, _gaussian_log_likelihood,
                                        num_samples=3, loop_settings=loop,
                                        weight_noise=weight_noise, **FRESH)
    return made[loop, weight_noise]
  return result


@pytest.mark.parametrize("weight_noise,loop", [
    ("per_example", LoopSettings()), ("per_batch", LoopSettings()),
    ("per_example", LoopSettings(noise_chunk_steps=10))])
def test_vectorised_refinement_equals_its_members_refined_apart(toy_fit, fresh_refinement,
                                                               weight_noise, loop):
  """3 members refined together equal the same members refined in a separate call of the same
  run (`member_offset`, `total_members`): members 1-2 as a run of 2, which neither starts at 0
  nor computes all 3 (one call, one traced loop: two calls, 0-1 and 2, traced two). Catches
  member rows of any stream (weight noise, auxiliary draws, batches) that depend on how many
  members a call computes or where they start (planted: the window's offset ignored; fails).
  Also with the noise drawn ahead in chunks (15 steps per stage: a partial chunk; XLA runs the
  same chunks, tests/test_loop_settings.py): catches chunk draws whose member rows depend on
  the number of members computed (planted: chunk draws of num_members rows; fails)."""
  x, y, trained = toy_fit
  together = fresh_refinement(loop, weight_noise)
  apart = refine(_mlp, trained, x, y, _gaussian_log_likelihood, num_samples=2, member_offset=1,
                 total_members=3, weight_noise=weight_noise, loop_settings=loop, **FRESH)
  members = slice(1, 3)
  assert apart.elbo_aux == pytest.approx(together.elbo_aux[members], rel=1e-4)
  assert apart.log_ratios == pytest.approx(together.log_ratios[:, members], rel=1e-4)
  assert apart.trace == pytest.approx(together.trace[:, members], rel=1e-4)
  for a, b in zip(apart.model.trainable_variables, together.model.trainable_variables):
    assert a.numpy() == pytest.approx(b.numpy()[members], rel=1e-4, abs=1e-6)
  # Different members really are different samples.
  assert not np.allclose(together.model.layers[0].kernel.posterior_loc[0],
                         together.model.layers[0].kernel.posterior_loc[1])


@pytest.mark.parametrize("loop", [LoopSettings(), LoopSettings(noise_chunk_steps=10)])
def test_a_reused_refiner_equals_fresh_refinements_and_traces_once(toy_fit, fresh_refinement,
                                                                   loop):
  """A Refiner refines two trained models at two seeds; its second result equals a fresh
  refine() of the same arguments bit for bit, and its loop and conditioning were traced once.
  Catches state carried from one call into the next (a stream not reseeded, the batch counter,
  the conditional prior of the last call; planted: the data stream not reseeded, the auxiliary
  stream not reseeded; each fails) and a Refiner that retraces anyway. The first model is the
  shared fit with every trainable variable moved (another trained state, without tracing
  another VI loop), at seed 6; the second is the shared fit at FRESH's seed, so the fresh
  refinement it equals is the shared one. (A Refiner's first call is what refine() runs, so
  only a later call can differ from a fresh one; comparing the first too cost one more
  traced loop.)"""
  x, y, trained = toy_fit
  moved = _mlp()
  moved(x[:1])
  rng = np.random.default_rng(2)
  trainable = {id(v) for v in trained.trainable_variables}
  for target, source in zip(moved.variables, trained.variables):
    shift = rng.normal(scale=0.1, size=source.shape) if id(source) in trainable else 0.0
    target.assign(source.numpy() + np.asarray(shift, source.dtype.as_numpy_dtype))
  refiner = Refiner(_mlp, x, y, _gaussian_log_likelihood, num_samples=3,
                    batch_size=FRESH["batch_size"], loop_settings=loop)
  settings = dict(schedule=FRESH["schedule"], steps_per_auxiliary=FRESH["steps_per_auxiliary"])
  first_trace = refiner.refine(moved, seed=6, **settings).trace.copy()
  reused = refiner.refine(trained, seed=FRESH["seed"], **settings)
  fresh = fresh_refinement(loop)
  assert not np.array_equal(first_trace, fresh.trace)   # the first call left other state
  np.testing.assert_array_equal(reused.elbo_aux, fresh.elbo_aux)
  np.testing.assert_array_equal(reused.trace, fresh.trace)
  for a, b in zip(reused.model.trainable_variables, fresh.model.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert refiner.loop.run.experimental_get_tracing_count() == 1
  assert refiner._condition.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("loop", [LoopSettings(), LoopSettings(noise_chunk_steps=10),
                                  LoopSettings(jit_compile=True, noise_chunk_steps=10)])
def test_a_refiner_prepared_on_another_thread_refines_as_a_fresh_one_without_tracing(
    toy_fit, fresh_refinement, loop):
  """`prepare()` on a second thread (as run_vi_family runs it while VI trains), then `refine`:
  the result equals a fresh refine() bit for bit, and the refine call traced nothing: the loop,
  the conditioning and the ELBO estimate were traced (and compiled) by `prepare`. Catches
  state that the preparation leaves behind (its conditioning, Adam moments, a stream's counter)
  and a preparation that traces the ELBO estimate with other settings than refine's (planted:
  prepare estimating with batches of 512 retraces it in refine; fails)."""
  x, y, trained = toy_fit
  settings = dict(schedule=FRESH["schedule"], steps_per_auxiliary=FRESH["steps_per_auxiliary"],
                  seed=FRESH["seed"])
  fresh = fresh_refinement(loop)
  refiner = Refiner(_mlp, x, y, _gaussian_log_likelihood, num_samples=3,
                    batch_size=FRESH["batch_size"], loop_settings=loop)
  with BackgroundWork(refiner.prepare) as preparation:
    preparation.start()
    assert preparation.result() > 0
  elbo_traces = _summed_log_likelihood.experimental_get_tracing_count()
  prepared = refiner.refine(trained, **settings)
  assert _summed_log_likelihood.experimental_get_tracing_count() == elbo_traces
  np.testing.assert_array_equal(prepared.elbo_aux, fresh.elbo_aux)
  np.testing.assert_array_equal(prepared.trace, fresh.trace)
  for a, b in zip(prepared.model.trainable_variables, fresh.model.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert refiner.loop.run.experimental_get_tracing_count() == 1
  assert refiner._condition.experimental_get_tracing_count() == 1
  if loop.jit_compile:
    assert refiner.loop.chunk_tracing_count() == 1


def test_every_auxiliary_variable_starts_a_fresh_adam(toy_fit):
  """Algorithm 1 restarts Adam at every a_k: the first step of a stage moves every variable by
  the learning rate (a fresh Adam's first step is lr * sign(gradient)).

  Two runs with one step per stage share every random draw; they differ only in the last stage's
  learning rate (0 or lr), so their difference is exactly that stage's first step. Mutations:
  refine() resetting Adam for its first stage only, so the last stage's step carries the earlier
  stages' moments (planted: 46 % of the steps then miss lr by more than 2 %; fails), or never
  (maximize(..., reset_optimizer=False): the second run, on the same Refiner, then also starts
  from the first run's moments and its draws' log ratios part; fails).
  """
  x, y, trained = toy_fit
  # One Refiner makes both runs (a reused Refiner is a fresh refine(), tested above): the loop
  # is traced once.
  refiner = Refiner(_mlp, x, y, _gaussian_log_likelihood, num_samples=4, batch_size=32)
  settings = dict(schedule=AuxiliarySchedule.geometric(0.7, 3), steps_per_auxiliary=1, seed=5)
  learning_rate = 1e-2
  held = refiner.refine(trained, learning_rates=[learning_rate, learning_rate, 0.0], **settings)
  held_weights = [v.numpy().copy() for v in held.model.trainable_variables]
  moved = refiner.refine(trained, learning_rates=[learning_rate] * 3, **settings)
  np.testing.assert_array_equal(held.log_ratios, moved.log_ratios)   # the same draws up to the step
  steps = np.concatenate([(after.numpy() - before).ravel() for before, after in
                          zip(held_weights, moved.model.trainable_variables)])
  moving = np.abs(steps) > 1e-3 * learning_rate   # a variable with no gradient does not move
  assert moving.mean() > 0.8
  step_sizes = np.abs(steps[moving]) / learning_rate
  assert np.mean(np.abs(step_sizes - 1) < 0.02) > 0.97, np.percentile(step_sizes, [1, 5, 50])


STAIRCASE = dict(schedule=AuxiliarySchedule.geometric(0.7, 3), steps_per_auxiliary=200,
                 learning_rates=[1e-2, 5e-3, 2e-3], seed=1)


@pytest.fixture(scope="module")
def staircase():
  """A fit of _mlp to 256 examples (300 VI steps), a Refiner of 8 members for it, and that
  refiner's refinement with STAIRCASE's settings (its weights copied: the refiner's members are
  reused), made once for the staircase tests."""
  x, y = _toy_regression(256)
  trained = _seeded_fit(x, y, num_steps=300, batch_size=64, learning_rate=1e-2)
  refiner = Refiner(_mlp, x, y, _gaussian_log_likelihood, num_samples=8, batch_size=64)
  plain = refiner.refine(trained, **STAIRCASE)
  return dict(x=x, y=y, trained=trained, refiner=refiner, plain=plain,
              plain_weights=[v.numpy().copy() for v in plain.model.trainable_variables])


def test_trace_rises_like_a_staircase_on_average(staircase):
  result = staircase["plain"]
  assert result.trace.shape == (600, 8)
  assert np.all(np.isfinite(result.trace))
  assert result.elbo_aux_estimate > result.initial_elbo_estimate
  assert result.timings["refine_seconds"] > 0


def test_per_batch_weight_noise_also_raises_elbo_aux(toy_fit, fresh_refinement):
  """One weight draw per member and step: a different gradient estimator of the same objective
  (its trace differs from per-example noise's at the same seeds), which also raises ELBO_aux (by
  about 5 nats here, over 0.16 of spread between members); the refined model, called afterwards,
  still draws noise per example. The shared fresh refinements (the vectorised test's) serve: a
  refinement of its own traced one more loop (calling the model moves only its noise counters,
  which no test reads)."""
  x, _, _ = toy_fit
  per_batch = fresh_refinement(LoopSettings(), "per_batch")
  assert not np.allclose(per_batch.trace, fresh_refinement(LoopSettings()).trace)
  assert per_batch.elbo_aux_estimate > per_batch.initial_elbo_estimate
  outputs = per_batch.model(np.repeat(x[:1], 4, axis=0)).numpy()
  assert not np.allclose(outputs[:, :1], outputs)


def test_stage_elbo_aux_measures_each_stage_without_changing_the_samples(staircase):
  """The whole-dataset ELBO_aux after each stage (Figure 4 without minibatch noise) is a measurement
  only: the refined samples, their trace and final ELBO_aux are bit-for-bit those of a run without
  it (the same Refiner's, which equals a fresh refine's: see the reused-refiner test)."""
  plain, plain_weights = staircase["plain"], staircase["plain_weights"]
  staged = staircase["refiner"].refine(staircase["trained"], stage_elbo_aux=True, **STAIRCASE)
  assert plain.stage_elbo_aux is None and "stage_elbo_seconds" not in plain.timings
  np.testing.assert_array_equal(staged.trace, plain.trace)
  np.testing.assert_array_equal(staged.elbo_aux, plain.elbo_aux)
  for a, b in zip(staged.model.trainable_variables, plain_weights):
    np.testing.assert_array_equal(a.numpy(), b)
  assert staged.stage_elbo_aux.shape == (3, 8)
  np.testing.assert_array_equal(staged.stage_elbo_aux[-1], staged.elbo_aux)
  # The first auxiliary variable's optimisation already lifts the bound well above the VI ELBO (the
  # 200-step trace's last values say the same), and later stages do not fall back below it.
  stage_means = staged.stage_elbo_aux.mean(axis=1)
  assert stage_means[0] > staged.initial_elbo_estimate + 20
  assert stage_means[0] == pytest.approx(staged.trace[180:200].mean(), abs=10)
  assert np.all(stage_means[1:] > stage_means[0] - 3)
  assert staged.timings["stage_elbo_seconds"] > 0


def test_stage_elbo_aux_on_a_subset_scales_it_to_the_whole_data():
  """On data whose every example appears twice in a row, the even-strided half holds each example
  once, so with a near-point posterior (draws do not matter) its scaled staircase equals the
  whole-data one, stage 0 (the start) and the last stage (ELBO_aux) included; the samples are
  unchanged. Catches the subset's log-likelihood left unscaled (planted: scale 1; fails by about
  half the log-likelihood), the KL or the log ratios scaled with it, and a staircase whose ends mix
  the subset's and the whole data's estimators."""
  x, y = _toy_regression(128)
  x, y = np.repeat(x, 2, axis=0), np.repeat(y, 2, axis=0)
  trained = _mlp()
  train_mean_field(trained, x, y, _gaussian_log_likelihood, num_steps=200, batch_size=64,
                   learning_rate=1e-2)
  for parameter in mean_field_parameters(trained):
    scale = parameter.untransformed_posterior_scale
    scale.assign(tf.fill(scale.shape, -18.0))
  settings = dict(schedule=AuxiliarySchedule.geometric(0.7, 3), steps_per_auxiliary=50,
                  learning_rates=[1e-2, 5e-3, 2e-3], seed=1, stage_elbo_aux=True)
  # One Refiner makes the three refinements (each equals a fresh refine(): see the reused-refiner
  # test), so its loop is traced once.
  refiner = Refiner(_mlp, x, y, _gaussian_log_likelihood, num_samples=4, batch_size=64)
  whole = refiner.refine(trained, **settings)
  half = refiner.refine(trained, stage_elbo_examples=128, **settings)
  np.testing.assert_array_equal(half.elbo_aux, whole.elbo_aux)
  np.testing.assert_array_equal(half.trace, whole.trace)
  assert whole.stage_elbo_start is None and half.stage_elbo_aux.shape == (3, 4)
  np.testing.assert_allclose(half.stage_elbo_start, whole.initial_elbo, rtol=1e-5)
  np.testing.assert_allclose(half.stage_elbo_aux, whole.stage_elbo_aux, rtol=1e-5)
  # Asking for all the examples (or more) is the whole-data staircase itself.
  every = refiner.refine(trained, stage_elbo_examples=256, **settings)
  np.testing.assert_array_equal(every.stage_elbo_aux, whole.stage_elbo_aux)
  assert every.stage_elbo_start is None


def test_mismatched_architecture_is_a_clear_error():
  x, y = _toy_regression()
  trained = _mlp()
  trained(x)

  def wider(m=None):
    return tf_keras.Sequential([DenseReparameterization(9, activation="relu", num_members=m),
                                DenseReparameterization(1, num_members=m)])

  with pytest.raises(ValueError, match=r"shape mismatch .*\[3, 8\] in the trained model, \[3, 9\]"):
    refine(wider, trained, x, y, _gaussian_log_likelihood, num_samples=2, steps_per_auxiliary=1)

  def deeper(m=None):
    return tf_keras.Sequential([DenseReparameterization(8, num_members=m),
                                DenseReparameterization(8, num_members=m),
                                DenseReparameterization(1, num_members=m)])

  with pytest.raises(ValueError, match="has 4 mean-field parameters, the model to refine has 6"):
    refine(deeper, trained, x, y, _gaussian_log_likelihood, num_samples=2, steps_per_auxiliary=1)
  with pytest.raises(ValueError, match="inputs have 64 examples but labels have 10"):
    refine(_mlp, trained, x, y[:10], _gaussian_log_likelihood, num_samples=2, steps_per_auxiliary=1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_samples=0), "num_samples=0"),
    (dict(steps_per_auxiliary=-1), "steps_per_auxiliary=-1"),
    (dict(learning_rate_rule="adam"), "unknown learning-rate rule 'adam'"),
    (dict(learning_rates=[1e-3]), "got 1 learning rates for K=5"),
    (dict(num_samples=2, member_offset=1), r"members \[1, 3\) do not fit in total_members=2"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(weight_noise="shared"), "unknown weight_noise 'shared'; allowed: per_example, per_batch")
])
def test_bad_arguments_are_rejected(kwargs, match):
  x, y = _toy_regression()
  trained = _mlp()
  trained(x)
  with pytest.raises(ValueError, match=match):
    refine(_mlp, trained, x, y, _gaussian_log_likelihood, **{"steps_per_auxiliary": 1, **kwargs})


def test_refinement_at_ratio_0_99_runs_in_float32(toy_fit):
  """K = 5 auxiliaries at ratio 0.99 leave 1e-10 of sigma_w^2; a float32 model must carry it to
  round-off, with every later prior variance and log-ratio finite.

  Mutation/bug caught: the old code subtracted each fraction from the float32 remainder, which
  lost all precision and raised InvalidArgumentError ("must stay below the remaining prior
  variance") at k = 5.
  """
  x, y, trained = toy_fit
  result = refine(_mlp, trained, x, y, _gaussian_log_likelihood, num_samples=2,
                  schedule=AuxiliarySchedule.geometric(0.99, 5), steps_per_auxiliary=2,
                  batch_size=32)
  assert np.all(np.isfinite(result.log_ratios)) and np.all(np.isfinite(result.elbo_aux))
  for layer in result.model.layers:
    for parameter in (layer.kernel, layer.bias):
      remaining = parameter.remaining_prior_fraction.numpy()
      assert remaining == pytest.approx(np.full_like(remaining, 0.01**5), rel=1e-7)
      assert np.all(np.isfinite(parameter.posterior_loc.numpy()))
      assert np.all(parameter.posterior_variance.numpy() > 0)


def test_schedule_float32_cannot_hold_is_one_clear_value_error():
  """Ratio 1 - 1e-9 rounds to 1 in float32: refine says so before any conditioning step.

  Mutation/bug caught: the old code raised a multi-line tf InvalidArgumentError from the compiled
  conditioning step instead ("must stay below the remaining prior variance").
  """
  x, y = _toy_regression()
  trained = _mlp()
  trained(x)
  with pytest.raises(ValueError, match=r"^auxiliary variance ratio 0\.999999999 with K=1: .* "
                                       r"rounds to the remaining fraction 1 .* float32") as error:
    refine(_mlp, trained, x, y, _gaussian_log_likelihood, num_samples=2, steps_per_auxiliary=1,
           schedule=AuxiliarySchedule.geometric(1 - 1e-9, 1))
  assert "\n" not in str(error.value)


def _partly_bayesian(num_members=None):
  """A deterministic conv with batch norm, then a Bayesian dense head: ResNet-20 hybrid in small."""
  from auxiliary_sampling.layers import FlattenImage, LayerChain
  from methods.trainers.batch_norm import MemberBatchNormalization
  from methods.trainers.deep_ensemble import MemberConv2D
  return LayerChain([MemberConv2D(3, 3, num_members, seed=1),
                     MemberBatchNormalization(num_members), FlattenImage(),
                     DenseReparameterization(4, num_members=num_members)])


@pytest.mark.parametrize("refit", [False, True])
def test_refinement_of_a_partly_bayesian_network_refits_deterministic_layers_only_on_request(refit):
  """The trained model's deterministic weights and batch-norm statistics reach every member.

  With `refit_deterministic` each member refits its own copy (the authors' Keras refit);
  without, they stay the trained ones. Catches: moving statistics left at their initial
  values in the members (a refined model that predicts with unnormalised activations).
  """
  from methods.trainers.batch_norm import MemberBatchNormalization
  from auxiliary_sampling.predictive import categorical_log_likelihood
  images = tf.random.stateless_normal([64, 6, 6, 2], seed=[7, 8]) * 2.0 + 1.0
  labels = tf.range(64) % 4
  trained = _partly_bayesian()
  trained(images, training=True)       # batch statistics move the moving averages
  train_mean_field(trained, images, labels, categorical_log_likelihood, num_steps=20,
                   batch_size=16)
  refiner = Refiner(_partly_bayesian, images, labels, categorical_log_likelihood, num_samples=3,
                    batch_size=16, refit_deterministic=refit)

  def refined(steps):   # one Refiner: each call reloads the trained state and reseeds
    return refiner.refine(trained, schedule=AuxiliarySchedule.geometric(0.7, 2),
                          steps_per_auxiliary=steps)

  # Loaded state, before any optimisation (which moves the statistics on).
  loaded = refined(0).model.chain[1]
  assert isinstance(loaded, MemberBatchNormalization)
  for member in range(3):
    np.testing.assert_allclose(loaded.moving_mean[member], trained.chain[1].moving_mean)
    np.testing.assert_allclose(loaded.moving_variance[member], trained.chain[1].moving_variance)
  result = refined(5)
  kernel, trained_kernel = result.model.chain[0].kernel, trained.chain[0].kernel
  moved = [not np.allclose(kernel[m], trained_kernel) for m in range(3)]
  assert moved == [refit] * 3
  if refit:
    assert not np.allclose(kernel[0], kernel[1])   # each member refits its own copy
  assert np.all(np.isfinite(result.elbo_aux))


def test_a_refinement_penalty_enters_the_optimisation_not_the_reported_elbo():
  """penalty_fn (the authors' L2 on deterministic kernels) pulls refitted kernels towards 0."""
  from auxiliary_sampling.predictive import categorical_log_likelihood
  images = tf.random.stateless_normal([64, 6, 6, 2], seed=[7, 8])
  labels = tf.range(64) % 4
  trained = _partly_bayesian()
  trained(images)

  def kernel_norms(penalty_fn):
    result = refine(_partly_bayesian, trained, images, labels, categorical_log_likelihood,
                    num_samples=2, schedule=AuxiliarySchedule.geometric(0.7, 1),
                    steps_per_auxiliary=20, batch_size=16, refit_deterministic=True,
                    penalty_fn=penalty_fn)
    kernel = result.model.chain[0].kernel
    return tf.reduce_sum(tf.square(kernel), axis=[1, 2, 3, 4]).numpy(), result

  free, _ = kernel_norms(None)
  penalised, result = kernel_norms(
      lambda members: 1e3 * tf.reduce_sum(tf.square(members.chain[0].kernel), axis=[1, 2, 3, 4]))
  assert np.all(penalised < free)
  assert np.all(np.isfinite(result.elbo_aux)) and np.all(result.elbo_aux < 0)


@pytest.mark.parametrize("loop", [LoopSettings(), LoopSettings(noise_chunk_steps=10)])
def test_refine_in_graph_is_algorithm_1_spelled_out_and_its_streams_go_on(toy_fit, loop):
  """A refiner built on a batch source alone refines, in a compiled function, to exactly the
  members Algorithm 1 written out step by step gives (copy the model; per stage draw a_k for
  every parameter and condition on it, reset Adam, T steps at the stage's rate: what the bandit
  did by hand, here on the same refiner reseeded), from the same seeds; a second call draws
  other samples (nothing reseeded); and refine() on it is refused in one line. Catches
  conditioning with other fractions, rates other than the stages', Adam not reset per auxiliary
  variable (planted: the reset removed; fails), and a call that reseeds (planted: a reseed at the
  call's start; fails). (refine() itself differs: its ELBO estimates draw weight noise.)"""
  x, y, trained = toy_fit
  schedule = AuxiliarySchedule.geometric(0.7, 2)
  rates = schedule.learning_rates("paper")
  # The by-hand run reuses the refiner (its members, streams and loop), reseeded as before the
  # compiled call: a second refiner would build and trace its loop again.
  in_graph = by_hand = Refiner(_mlp, None, None, _gaussian_log_likelihood, num_samples=3,
                               loop_settings=loop, batches=UniformBatches(x, y, 32))
  in_graph.reseed(*stream_seeds(3))

  @graph_function
  def refined_weights():
    members = in_graph.refine_in_graph(trained, schedule=schedule, steps_per_auxiliary=15,
                                       learning_rates=rates)
    return [tf.identity(v) for v in members.trainable_variables]
  first = [v.numpy() for v in refined_weights()]
  by_hand.reseed(*stream_seeds(3))
  load_trained_state(trained, by_hand.members)
  for stage, (fraction, rate) in enumerate(zip(schedule.variance_fractions, rates), 1):
    for parameter in mean_field_parameters(by_hand.members):
      parameter.condition_on_auxiliary(fraction, schedule.remaining_fraction(stage),
                                       by_hand.auxiliary_noise.normal(parameter.event_shape))
    by_hand.loop.update.reset()
    by_hand.loop.run(tf.constant(15), tf.constant(rate), tf.constant(0.0))
  for a, b in zip(first, by_hand.members.trainable_variables):
    np.testing.assert_array_equal(a, b.numpy())
  # The streams now stand where the compiled call left them: a call that reseeds repeats `first`.
  second = refined_weights()
  assert not np.array_equal(first[0], second[0].numpy())
  with pytest.raises(ValueError, match="refine_in_graph"):
    in_graph.refine(trained, schedule=schedule, steps_per_auxiliary=15)
