"""The Appendix A closed forms against exact Gaussian algebra, Monte Carlo and limits."""
import numpy as np
import pytest
import tensorflow as tf

from auxiliary_sampling import conditionals as c
from auxiliary_sampling.parameters import GaussianMeanField
from auxiliary_sampling.schedule import AuxiliarySchedule

# A case with non-zero prior and auxiliary means and an uneven variance split.
CASE = dict(posterior_loc=0.7, posterior_variance=0.3, prior_loc=-0.4, prior_variance=2.0,
            aux_loc=0.25, aux_variance=1.3)


def _np(pair):
  return tuple(float(np.asarray(v)) for v in pair)


def _joint_prior(prior_loc, prior_variance, aux_loc, aux_variance):
  """Mean and covariance of (a_k, w) under the prior: w = a_k + rest, rest independent."""
  mean = np.array([aux_loc, prior_loc])
  cov = np.array([[aux_variance, aux_variance], [aux_variance, prior_variance]])
  return mean, cov


def test_closed_forms_match_generic_gaussian_conditioning():
  p = CASE
  mean, cov = _joint_prior(p["prior_loc"], p["prior_variance"], p["aux_loc"], p["aux_variance"])
  # p(a | w): Schur complement of the prior joint.
  gain = cov[0, 1] / cov[1, 1]
  w = 1.9
  expected = (mean[0] + gain * (w - mean[1]), cov[0, 0] - gain * cov[1, 0])
  got = _np(
      c.auxiliary_given_weight(w, p["prior_loc"], p["prior_variance"], p["aux_loc"],
                               p["aux_variance"]))
  assert got == pytest.approx(expected, rel=1e-12)
  # Joint under q: w ~ q(w), a | w ~ p(a | w) = N(alpha + gain * w, noise).
  alpha, noise = mean[0] - gain * mean[1], expected[1]
  q_mean = np.array([alpha + gain * p["posterior_loc"], p["posterior_loc"]])
  q_cov = np.array([[gain**2 * p["posterior_variance"] + noise, gain * p["posterior_variance"]],
                    [gain * p["posterior_variance"], p["posterior_variance"]]])
  marginal = _np(c.auxiliary_marginal(p["posterior_loc"], p["posterior_variance"], p["prior_loc"],
                                      p["prior_variance"], p["aux_loc"], p["aux_variance"]))
  assert marginal == pytest.approx((q_mean[0], q_cov[0, 0]), rel=1e-12)
  a = -0.8
  cond_gain = q_cov[1, 0] / q_cov[0, 0]
  expected_w = (q_mean[1] + cond_gain * (a - q_mean[0]), q_cov[1, 1] - cond_gain * q_cov[0, 1])
  got_w = _np(c.posterior_given_auxiliary(a, **CASE))
  assert got_w == pytest.approx(expected_w, rel=1e-12)
  # p(w | a): conditioning the prior joint on a.
  prior_gain = cov[1, 0] / cov[0, 0]
  expected_prior = (mean[1] + prior_gain * (a - mean[0]), cov[1, 1] - prior_gain * cov[0, 1])
  got_prior = _np(
      c.prior_given_auxiliary(a, p["prior_loc"], p["prior_variance"], p["aux_loc"],
                              p["aux_variance"]))
  assert got_prior == pytest.approx(expected_prior, rel=1e-12)


def test_closed_forms_match_monte_carlo():
  rng = np.random.default_rng(1)
  p, n = CASE, 2_000_000
  # Ancestral sampling from the model: w ~ q(w), then a ~ p(a | w) by sampling
  # the prior joint of (a, rest) and conditioning by importance weighting is
  # avoided: draw a ~ p(a | w) via the generative split w = a + rest directly.
  w = rng.normal(p["posterior_loc"], np.sqrt(p["posterior_variance"]), n)
  a_loc, a_var = c.auxiliary_given_weight(w, p["prior_loc"], p["prior_variance"], p["aux_loc"],
                                          p["aux_variance"])
  a = rng.normal(np.asarray(a_loc), np.sqrt(float(a_var)))
  marginal_loc, marginal_var = _np(
      c.auxiliary_marginal(p["posterior_loc"], p["posterior_variance"], p["prior_loc"],
                           p["prior_variance"], p["aux_loc"], p["aux_variance"]))
  assert a.mean() == pytest.approx(marginal_loc, abs=4e-3)
  assert a.var() == pytest.approx(marginal_var, rel=4e-3)
  # The other factorisation, a ~ q(a) then w ~ q(w | a), gives the same joint.
  a2 = rng.normal(marginal_loc, np.sqrt(marginal_var), n)
  w_loc, w_var = c.posterior_given_auxiliary(a2, **CASE)
  w2 = rng.normal(np.asarray(w_loc), np.sqrt(float(w_var)))
  assert np.cov(np.stack([a2, w2])) == pytest.approx(np.cov(np.stack([a, w])), rel=1e-2, abs=5e-3)
  assert w2.mean() == pytest.approx(p["posterior_loc"], abs=4e-3)


def test_prior_split_from_monte_carlo():
  """p(a | w) from samples of the prior: regress a on w for w = a + rest."""
  rng = np.random.default_rng(2)
  p, n = CASE, 2_000_000
  a = rng.normal(p["aux_loc"], np.sqrt(p["aux_variance"]), n)
  rest = rng.normal(p["prior_loc"] - p["aux_loc"], np.sqrt(p["prior_variance"] - p["aux_variance"]),
                    n)
  w = a + rest
  slope, intercept = np.polyfit(w, a, 1)
  residual_var = np.var(a - (slope * w + intercept))
  loc_at_1, var = _np(
      c.auxiliary_given_weight(1.0, p["prior_loc"], p["prior_variance"], p["aux_loc"],
                               p["aux_variance"]))
  assert slope + intercept == pytest.approx(loc_at_1, abs=3e-3)
  assert residual_var == pytest.approx(var, rel=3e-3)


def test_ratio_to_zero_changes_nothing():
  p = dict(CASE, aux_variance=1e-12 * CASE["prior_variance"])
  # A typical draw from q(a): one marginal standard deviation from its mean.
  m_loc, m_var = _np(
      c.auxiliary_marginal(p["posterior_loc"], p["posterior_variance"], p["prior_loc"],
                           p["prior_variance"], p["aux_loc"], p["aux_variance"]))
  assert m_loc == pytest.approx(p["aux_loc"], abs=1e-9) and m_var < 1e-11
  loc, var = _np(c.posterior_given_auxiliary(m_loc + np.sqrt(m_var), **p))
  assert (loc, var) == pytest.approx((p["posterior_loc"], p["posterior_variance"]), rel=1e-5)
  assert _np(
      c.prior_given_auxiliary(p["aux_loc"], p["prior_loc"], p["prior_variance"], p["aux_loc"],
                              p["aux_variance"])) == pytest.approx(
                                  (p["prior_loc"], p["prior_variance"]))


def test_ratio_to_one_collapses_onto_the_sample():
  p = dict(CASE, aux_variance=(1 - 1e-10) * CASE["prior_variance"])
  a = 1.1
  loc, var = _np(c.posterior_given_auxiliary(a, **p))
  # w = a_k + (residual with mean prior_loc - aux_loc and ~zero variance).
  assert loc == pytest.approx(a + p["prior_loc"] - p["aux_loc"], rel=1e-6)
  assert var == pytest.approx(0.0, abs=1e-9)
  # q(a) then has the shape of q(w), shifted by the means.
  m_loc, m_var = _np(
      c.auxiliary_marginal(p["posterior_loc"], p["posterior_variance"], p["prior_loc"],
                           p["prior_variance"], p["aux_loc"], p["aux_variance"]))
  assert (m_loc, m_var) == pytest.approx((p["posterior_loc"] - p["prior_loc"] + p["aux_loc"],
                                          p["posterior_variance"]), rel=1e-6)


def test_delta_posterior():
  p = dict(CASE, posterior_variance=0.0)
  given_w = _np(c.auxiliary_given_weight(p["posterior_loc"], p["prior_loc"], p["prior_variance"],
                                         p["aux_loc"], p["aux_variance"]))
  marginal = _np(c.auxiliary_marginal(p["posterior_loc"], 0.0, p["prior_loc"], p["prior_variance"],
                                      p["aux_loc"], p["aux_variance"]))
  assert marginal == pytest.approx(given_w)  # q(a) = p(a | w = nu)
  assert _np(c.posterior_given_auxiliary(0.3, **p)) == pytest.approx((p["posterior_loc"], 0.0))


def test_posterior_equal_to_prior():
  p = dict(CASE, posterior_loc=CASE["prior_loc"], posterior_variance=CASE["prior_variance"])
  marginal = _np(c.auxiliary_marginal(p["posterior_loc"], p["posterior_variance"], p["prior_loc"],
                                      p["prior_variance"], p["aux_loc"], p["aux_variance"]))
  assert marginal == pytest.approx((p["aux_loc"], p["aux_variance"]))  # q(a) = p(a)
  a = 0.9
  assert _np(c.posterior_given_auxiliary(a, **p)) == pytest.approx(
      _np(
          c.prior_given_auxiliary(a, p["prior_loc"], p["prior_variance"], p["aux_loc"],
                                  p["aux_variance"])))


def test_normal_kl_and_log_prob_match_tfp():
  import tensorflow_probability as tfp
  tfd = tfp.distributions
  q, p = tfd.Normal(0.3, 0.5), tfd.Normal(-0.2, 1.7)
  assert float(c.normal_kl(0.3, 0.25, -0.2,
                           1.7**2)) == pytest.approx(float(tfd.kl_divergence(q, p)), rel=1e-5)
  assert float(c.normal_log_prob(0.4, 0.3, 0.25)) == pytest.approx(float(q.log_prob(0.4)), rel=1e-5)


def test_conditioning_step_keeps_the_marginal_and_the_elbo():
  """Section 3.2: q_k := q_{k-1}(w | a_k) leaves q(w) and, in expectation, the ELBO unchanged."""
  members = 200_000
  parameter = GaussianMeanField([], num_members=members, prior_scale=1.5, dtype=tf.float64)
  parameter.posterior_loc.assign(tf.fill([members], tf.constant(0.6, tf.float64)))
  parameter.untransformed_posterior_scale.assign(
      tf.fill([members], tf.constant(np.log(np.expm1(0.4)), tf.float64)))
  kl_before = float(parameter.kl_divergence()[0])
  noise = tf.random.stateless_normal([members], seed=[3, 4], dtype=tf.float64)
  log_ratio = parameter.condition_on_auxiliary(0.7, 0.3, noise).numpy()
  loc, variance = parameter.posterior_loc.numpy(), parameter.posterior_variance.numpy()
  # Mixture over a_k of the new posteriors is the old posterior N(0.6, 0.4^2).
  assert loc.mean() == pytest.approx(0.6, abs=3e-3)
  assert variance.mean() + loc.var() == pytest.approx(0.16, rel=1e-2)
  # E[log q(a)/p(a)] = KL(q(a) || p(a)).
  m_loc, m_var = _np(c.auxiliary_marginal(0.6, 0.16, 0.0, 2.25, 0.0, 0.7 * 2.25))
  expected_kl = float(c.normal_kl(m_loc, m_var, 0.0, 0.7 * 2.25))
  assert log_ratio.mean() == pytest.approx(expected_kl, abs=3e-3)
  # KL(q || p) = E_a[ KL(q(w|a) || p(w|a)) + log q(a)/p(a) ]: the ELBO is unchanged.
  kl_after = parameter.kl_divergence().numpy()
  assert (kl_after + log_ratio).mean() == pytest.approx(kl_before, abs=5e-3)
  assert parameter.remaining_prior_fraction.numpy().ravel()[0] == pytest.approx(0.3)


def _conditioned_states(schedule: AuxiliarySchedule, dtype: tf.DType) -> list[dict]:
  """Runs the K conditioning steps (Appendix A) on 64 weights; the state after each step."""
  rng = np.random.default_rng(5)
  parameter = GaussianMeanField([64], prior_scale=1.5, dtype=dtype)
  # A posterior of about a third of the prior's variance, centred off the prior mean.
  parameter.posterior_loc.assign(tf.constant(rng.normal(0.5, 0.4, 64), dtype))
  parameter.untransformed_posterior_scale.assign(
      tf.constant(np.log(np.expm1(rng.uniform(0.5, 1.0, 64))), dtype))
  states = []
  for k, fraction in enumerate(schedule.variance_fractions, start=1):
    noise = tf.constant(rng.normal(size=64), dtype)
    log_ratio = parameter.condition_on_auxiliary(fraction, schedule.remaining_fraction(k), noise)
    states.append(dict(
        prior_fraction=float(parameter.remaining_prior_fraction.numpy().ravel()[0]),
        prior_variance=parameter.prior_variance.numpy().astype(np.float64).ravel(),
        prior_loc=parameter.conditional_prior_loc.numpy().astype(np.float64),
        posterior_loc=parameter.posterior_loc.numpy().astype(np.float64),
        posterior_variance=parameter.posterior_variance.numpy().astype(np.float64),
        log_ratio=float(log_ratio)))
  return states


@pytest.mark.parametrize("ratio,num_auxiliary", [(0.7, 5), (0.9, 5), (0.99, 5), (0.999, 3)])
def test_float32_conditioning_matches_float64(ratio, num_auxiliary):
  """The conditional prior variances s_k^2 and the conditional posteriors q_{k-1}(w | a_k) of
  Appendix A come out of a float32 model as from a float64 one, to float32 round-off, even when
  the prior keeps only (1 - r)^K = 1e-10 (r = 0.99) or 1e-9 (r = 0.999) of sigma_w^2. Measured:
  s_k^2 within 9e-8 relative, posterior variances 1.5e-6 (the softplus round trip), means 2.5e-7
  of |mean| + sigma_w.

  Mutation/bug caught: the remaining fraction updated as remaining - fraction in float32 (the old
  assign_sub) is 2e-3 relative off at r = 0.9 after K = 5 and raises InvalidArgumentError at
  r = 0.99 and 0.999; s_k^2 taken as prior_variance - aux_variance (no residual passed in) puts
  the posterior variances 9e-6 relative off at r = 0.99 and 4e-5 at r = 0.999.
  """
  schedule = AuxiliarySchedule.geometric(ratio, num_auxiliary)
  single, double = (_conditioned_states(schedule, dtype) for dtype in (tf.float32, tf.float64))
  for k, (got, want) in enumerate(zip(single, double), start=1):
    assert want["prior_fraction"] == pytest.approx((1 - ratio)**k, rel=1e-12)
    assert got["prior_variance"] == pytest.approx(want["prior_variance"], rel=1e-6), k
    assert got["posterior_variance"] == pytest.approx(want["posterior_variance"], rel=5e-6), k
    # A float32 mean is good to its round-off, on the scale of itself and of sigma_w = 1.5 (a
    # mean of size 1 cannot resolve the 1e-5 prior scale left at r = 0.99, K = 5, better).
    for name in ("prior_loc", "posterior_loc"):
      error = np.abs(got[name] - want[name]) / (np.abs(want[name]) + 1.5)
      assert np.all(error < 1e-6), (k, name, error.max())
    assert got["log_ratio"] == pytest.approx(want["log_ratio"], rel=1e-5, abs=1e-2), k
