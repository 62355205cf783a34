"""The bandit agents' behaviour that the paper's comparison rests on: the samples refined_ts acts
on are refined on the history, vi_ts averages distinct posterior draws, the reward likelihood's
scale is fixed or learned as asked, untrained agents explore both actions, and a diverged model
stops the run."""
import numpy as np
import pytest
import tensorflow as tf

from auxiliary_sampling.model_parameters import mean_field_parameters
from bandits import main as bandit_main
from bandits import mushroom
from bandits.agents import make_agent
from bandits.config import BanditConfig
from bandits.interaction import RegretRecord
from report import bandit_regret_sources
# The bandit tests' tiny settings (one definition for both files).
from tests.test_bandits import TINY
from tests.usage_runs import UsageRuns


def _fill_history(agent, mushrooms, rows: int, rng: np.random.Generator) -> None:
  """Appends `rows` mushrooms to every member's history, each eaten (at its expected reward: +5
  edible, -15 poisonous) and passed (0), without updating the model (q stays untrained)."""
  chosen = rng.integers(0, len(mushrooms.edible), rows)
  groups = agent.history.inputs.shape[0]
  for row in chosen:
    eat_reward = mushroom.REWARD_EDIBLE if mushrooms.edible[row] else (
        mushroom.EXPECTED_REWARD_POISONOUS)
    contexts = tf.constant(np.repeat(mushrooms.contexts[row:row + 1], groups, 0))
    for action, reward in ((mushroom.EAT, eat_reward), (mushroom.PASS, mushroom.REWARD_PASS)):
      agent.history.append(contexts, tf.fill([groups], action), tf.fill([groups], reward))


def test_refined_ts_acts_on_samples_refined_on_the_history(mushrooms):
  """With an untrained q and a history that separates edible from poisonous mushrooms, refined_ts's
  predicted eat-minus-pass gaps must separate them too: refinement fits each sample to the history.
  Catches refined_ts acting on samples of q instead of its refined samples (planted:
  `self.model.action_means` in place of the refined samples' `action_means`; fails), and
  choosing without refining (planted: the samples' model used without `refine_samples()`;
  fails)."""
  seeds = (0, 1, 2, 3)
  config = BanditConfig(**dict(TINY, seeds=seeds, horizon=400, refine_steps=300, hidden_units=16,
                               learning_rate=1e-2, noise_scale="1"))
  agent = make_agent("refined_ts", config, mushroom.NUM_FEATURES)
  _fill_history(agent, mushrooms, 200, np.random.default_rng(0))
  rng = np.random.default_rng(1)
  edible = rng.choice(np.flatnonzero(mushrooms.edible), 2 * len(seeds), replace=False)
  poisonous = rng.choice(np.flatnonzero(~mushrooms.edible), 2 * len(seeds), replace=False)
  gaps = {}
  for name, rows in (("edible", edible), ("poisonous", poisonous)):
    gaps[name] = np.concatenate([
        agent.decide(tf.constant(mushrooms.contexts[part]), tf.constant(step, tf.int64))[1]
        .numpy()[:, 0] for step, part in enumerate(np.split(rows, 2))])
  # Measured: edible +0.6 to +5.9, poisonous -13.9 to -15.3 (the history's +5 and -15).
  assert np.all(gaps["edible"] > 0.0), gaps
  assert np.all(gaps["poisonous"] < -8.0), gaps


def test_vi_ts_averages_distinct_posterior_draws(mushrooms):
  """The mean of k Thompson samples has 1/k of one sample's variance when the k draws are
  distinct. Catches vi_ts averaging one draw k times (planted: the forward pass computed once and
  stacked `samples` times; the variance ratio becomes 1 and this fails)."""
  contexts = tf.constant(mushrooms.contexts[:2])
  variances = {}
  for samples in (1, 4):
    config = BanditConfig(**dict(TINY, num_thompson_samples=samples,
                                 initial_untransformed_posterior_scale=0.0))
    agent = make_agent("vi_ts", config, mushroom.NUM_FEATURES)
    gaps = np.stack([agent.decide(contexts, tf.constant(step, tf.int64))[1].numpy()[:, 0]
                     for step in range(120)])
    variances[samples] = gaps.var(axis=0)
  assert np.all(variances[1] > 0.5), variances
  # Measured ratios 0.16 and 0.25 over 120 decisions (expected 0.25).
  np.testing.assert_array_less(variances[4] / variances[1], 0.45)


# Enough seeds for the untrained agents' eat fraction (one decision per seed).
UNTRAINED_SEEDS = tuple(range(24))


@pytest.fixture(scope="module")
def scale_agents():
  """Per agent name, its two agents of `_scale_agents`, built once for the two tests below."""
  return {}


def _scale_agents(built: dict, agent_name: str, mushrooms) -> dict:
  """`agent_name`'s agents with --noise_scale=0.5 and learned, over UNTRAINED_SEEDS, each with
  whether it ate each seed's mushroom in its first decision, made as it was built (before the
  fixed-scale test trains it: the untrained test reads only these first decisions). The two tests
  share them: each agent built traces its decide and observe, most of either test's time."""
  if agent_name not in built:
    contexts = tf.constant(mushrooms.contexts[:len(UNTRAINED_SEEDS)])
    built[agent_name] = {}
    for noise_scale in ("0.5", "learned"):
      config = BanditConfig(**dict(TINY, seeds=UNTRAINED_SEEDS, noise_scale=noise_scale,
                                   update_steps=20, learning_rate=1e-2, epsilons=(0.0,)))
      agent = make_agent(agent_name, config, mushroom.NUM_FEATURES)
      eaten = agent.choose(contexts, tf.constant(0, tf.int64)).numpy()[:, 0] == mushroom.EAT
      built[agent_name][noise_scale] = (agent, eaten)
  return built[agent_name]


@pytest.mark.parametrize("agent_name", ["refined_ts", "vi_ts", "eps_greedy"])
def test_a_fixed_noise_scale_stays_fixed_and_a_learned_one_moves(scale_agents, mushrooms,
                                                                 agent_name):
  """Catches --noise_scale accepted but the scale still trained (it would drift from 0.5 after the
  updates) or not used by the likelihood (the model's predicted scale would not be 0.5), and
  refinement's copies using another scale than the updates.

  refined_ts, either scale: catches refinement that writes into the mean-field model (the paper
  discards each refined sample), a copy whose prior is not conditioned on a1 (its remaining
  fraction), and a copy that refinement's steps do not move (planted: no steps; its variances
  stay q(w | a1)'s)."""
  contexts = tf.constant(mushrooms.contexts[:len(UNTRAINED_SEEDS)])
  rewards = tf.constant(np.resize([5.0, -35.0], [len(UNTRAINED_SEEDS), 1]), tf.float32)
  final = {}
  for noise_scale, (agent, _) in _scale_agents(scale_agents, agent_name, mushrooms).items():
    config = agent.config
    for step in range(3):
      actions = agent.choose(contexts, tf.constant(step, tf.int64))
      agent.observe(contexts, actions, rewards)
    before = [variable.numpy() for variable in agent.model.trainable_variables]
    agent.choose(contexts, tf.constant(3, tf.int64))
    final[noise_scale] = agent.model.noise.noise_scale.numpy()
    assert agent.history.count.numpy() == 3
    if agent_name == "refined_ts":
      for variable, value in zip(agent.model.trainable_variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)
      samples, trained = mean_field_parameters(agent.samples), mean_field_parameters(agent.model)
      assert len(samples) == len(trained) > 0
      for sample, parameter in zip(samples, trained):
        np.testing.assert_allclose(sample.remaining_prior_fraction.numpy(), 0.3, rtol=1e-6)
        assert not np.allclose(sample.posterior_loc.numpy(),
                               np.repeat(parameter.posterior_loc.numpy(), 3, axis=0))
        # q(w | a1)'s variance, whatever a1 (Appendix A; a1 takes 0.7 of the prior's variance).
        variance = np.repeat(parameter.posterior_variance.numpy(), 3, axis=0)
        prior = np.repeat(np.square(parameter.prior_scale.numpy()), 3, axis=0)
        conditional = variance * 0.3 * prior / (0.3 * prior + 0.7 * variance)
        assert not np.allclose(sample.posterior_variance.numpy(), conditional, rtol=1e-3)
    if noise_scale == "0.5":
      outputs = agent.model(tf.zeros([agent.num_members, 3, mushroom.NUM_FEATURES + 1]))
      np.testing.assert_allclose(outputs[..., 1].numpy(), 0.5, rtol=1e-5)
      assert all(scales == [0.5] * 2 or np.allclose(scales, 0.5)
                 for scales in agent.noise_scales().values())
      if agent_name == "refined_ts":
        np.testing.assert_allclose(agent.samples.noise.noise_scale.numpy(), 0.5, rtol=1e-5)
  np.testing.assert_allclose(final["0.5"], 0.5, rtol=1e-5)
  assert np.all(np.abs(final["learned"] - config.initial_noise_scale) > 1e-3)


@pytest.mark.parametrize("agent_name", ["refined_ts", "vi_ts", "eps_greedy"])
def test_untrained_agents_try_both_actions_without_forced_pulls(scale_agents, mushrooms,
                                                                agent_name):
  """No agent pulls each action a fixed number of times first (the benchmark's BBB agent does;
  the paper describes no such phase): an untrained network's predicted rewards of the two actions
  differ at random, so before any data each agent eats some mushrooms and passes others, and
  Thompson sampling then explores from the posterior. Catches a tie-break or initialisation that
  makes untrained agents always pass (no eat data would ever be collected but by epsilon). (The
  first decisions of the fixed-scale test's agents, with a fixed and a learned noise scale: the
  scale plays no part in a decision before any data.)"""
  for noise_scale, (_, eaten) in _scale_agents(scale_agents, agent_name, mushrooms).items():
    assert 0.2 < eaten.mean() < 0.8, (noise_scale, eaten.mean())


@pytest.mark.parametrize("agent_name", ["refined_ts", "vi_ts", "eps_greedy", "svgd_ts"])
def test_a_diverged_agent_is_a_failure_not_a_result(tmp_path, data_dir_for, agent_name):
  """At learning rate 1e30 every model diverges in its first update. Catches the bandit writing
  results.json from NaN networks (each then passes on every mushroom and its regret looks valid).
  The binary makes the error one line, exit 1 (tests/test_cli.py)."""
  config = BanditConfig(**dict(TINY, agents=(agent_name,), learning_rate=1e30, num_particles=2,
                               data_dir=data_dir_for("mushroom")))
  with pytest.raises(FloatingPointError, match=f"{agent_name}: non-finite .* at bandit step 1 "):
    bandit_main.train_and_evaluate(config, str(tmp_path))
  assert not (tmp_path / "results.json").exists()


BAD_NOISE_SCALES = [
    (["--noise_scale=0"], "noise_scale='0' is not allowed; allowed: learned, or a finite number"),
    (["--noise_scale=-1"], "noise_scale='-1' is not allowed"),
    (["--noise_scale=inf"], "noise_scale='inf' is not allowed"),
    (["--noise_scale=nan"], "noise_scale='nan' is not allowed"),
    (["--noise_scale=wide"], "noise_scale='wide' is not allowed"),
    (["--noise_scale=1", "--agents=svgd_ts"], "allowed: noise_scale=learned for svgd_ts"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The binary's runs with each of BAD_NOISE_SCALES, made together."""
  return UsageRuns.in_output_dirs("bandits.main", tmp_path_factory.mktemp("refusals"),
                                  [flags for flags, _ in BAD_NOISE_SCALES],
                                  environment={"TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("flags, message", BAD_NOISE_SCALES)
def test_a_bad_noise_scale_is_one_usage_line(refusals, flags, message):
  completed, output_dir = refusals.in_output_dir(*flags)
  assert completed.returncode == 2
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
  assert not output_dir.exists()


def test_quarter_diagnostics_give_eat_rates_and_gaps_by_class():
  """From a record whose classes, actions and gaps are known: the eat rate and mean predicted gap
  of each class in each quarter. Catches classes read from the action alone (an eaten mushroom at
  regret 0 is edible, a passed one at 0 poisonous) and quarters cut from the wrong end."""
  steps = 8
  edible = np.array([True, False] * 4)
  actions = np.array([1, 1, 0, 0, 1, 0, 0, 1])
  expected = np.where(edible, np.where(actions == 1, 0.0, 5.0), np.where(actions == 1, 15.0, 0.0))
  gaps = np.arange(steps, dtype=np.float32) - 3.0
  record = RegretRecord(line_names=["vi_ts"], seeds=[3], actions=actions[None, None],
                        rewards=np.zeros([1, 1, steps]), expected_regret=expected[None, None],
                        realised_regret=expected[None, None], seconds=1.0,
                        predicted_gap=gaps[None, None])
  np.testing.assert_array_equal(bandit_regret_sources.mushroom_classes(actions, expected), edible)
  rows = bandit_regret_sources.quarter_diagnostics([record])
  assert [(row["first_step"], row["last_step"]) for row in rows] == [(1, 2), (3, 4), (5, 6),
                                                                     (7, 8)]
  assert [row["edible"]["eat_rate"] for row in rows] == [1.0, 0.0, 1.0, 0.0]
  assert [row["poisonous"]["eat_rate"] for row in rows] == [1.0, 0.0, 0.0, 1.0]
  assert [row["edible"]["mean_gap"] for row in rows] == [-3.0, -1.0, 1.0, 3.0]
  assert [row["poisonous"]["mean_gap"] for row in rows] == [-2.0, 0.0, 2.0, 4.0]
  table = bandit_regret_sources.quarter_table(rows)
  assert "| vi_ts | 3 | 7-8 | 0% | 100% | +3.00 | +4.00 |" in table
  without_gaps = RegretRecord(**{**record.__dict__, "predicted_gap": None})
  assert bandit_regret_sources.quarter_diagnostics([without_gaps])[0]["edible"]["mean_gap"] is None
