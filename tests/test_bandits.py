"""The mushroom bandit: environment, learning from growing per-member histories, the agents, and the
binary end to end (resume after a kill, bad input)."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.training_batches import GroupedBatches
from auxiliary_sampling.training_loop import TrainingLoop
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import mean_field_parameters
from auxiliary_sampling.trained_state import load_trained_state
from bandits import main as bandit_main
from bandits import figure as bandit_figure
from bandits import mushroom, sample_quality
from bandits.agents import make_agent
from bandits.reward_model import reward_model
from bandits.config import BanditConfig
from bandits.interaction import RegretRecord, interact
from methods.trainers.gaussian_head import gaussian_head_log_likelihood
from common.config import UsageError
from tests.usage_runs import UsageRuns

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Runs that read the data add data_dir=data_dir_for("mushroom"). Loops that draw inside each step
# (the agents take their loop settings from the config).
TINY = dict(seeds=(0, 1), horizon=12, update_steps=6, refine_steps=6, hidden_units=8,
            epsilons=(0.0, 1.0), steps_per_checkpoint=5, regret_report_interval=5,
            download=False, jit_compile=False, noise_chunk_steps=0)


def test_encoding_is_the_benchmarks_one_hot_of_all_22_attributes(mushrooms):
  assert mushrooms.contexts.shape == (8124, 117)
  np.testing.assert_array_equal(mushrooms.contexts.sum(axis=1), 22)   # one value per attribute
  assert mushrooms.edible.sum() == 4208                              # UCI: 4208 e, 3916 p
  # Every value that occurs is a column that is used (pandas.get_dummies keeps only those).
  assert np.all(mushrooms.contexts.sum(axis=0) > 0)


@pytest.mark.parametrize("line, message", [
    ("e,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s", "22 fields"),
    ("e,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u,u", "24 fields"),
    ("e,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,Q", "column 23: unknown category 'Q'"),
    ("x,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u", "column 1: unknown category 'x'"),
])
def test_a_corrupt_file_names_its_line(tmp_path, line, message):
  path = tmp_path / "agaricus-lepiota.data"
  path.write_text("p,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u\n" + line + "\n")
  with pytest.raises(ValueError, match="line 2") as raised:
    mushroom.parse(str(path))
  assert message in str(raised.value)


def test_rewards_regrets_and_the_omniscient_agent():
  edible = np.array([True, True, False, False])
  unlucky = np.array([False, True, False, True])
  eat = np.full(4, mushroom.EAT)
  np.testing.assert_array_equal(mushroom.rewards(edible, unlucky, eat), [5, 5, 5, -35])
  np.testing.assert_array_equal(mushroom.rewards(edible, unlucky, 1 - eat), [0, 0, 0, 0])
  np.testing.assert_array_equal(mushroom.expected_rewards(edible, eat), [5, 5, -15, -15])
  np.testing.assert_array_equal(mushroom.optimal_actions(edible), [1, 1, 0, 0])
  # The luck of poisonous mushrooms averages to the expected reward (Monte Carlo, 200k draws).
  stream = mushroom.EnvironmentStream.draw(np.array([3]), 200_000, num_mushrooms=10)
  realised = mushroom.rewards(np.zeros(200_000, bool), stream.unlucky[0], np.ones(200_000, int))
  assert realised.mean() == pytest.approx(mushroom.EXPECTED_REWARD_POISONOUS, abs=0.3)


def test_a_seeds_stream_does_not_depend_on_the_other_seeds():
  """Catches seeding the environment from the seed list: a seed's mushrooms would change when
  seeds are added, and every agent of that seed must meet the same stream."""
  alone = mushroom.EnvironmentStream.draw(np.array([4]), 50, 8124)
  together = mushroom.EnvironmentStream.draw(np.array([0, 4, 9]), 50, 8124)
  np.testing.assert_array_equal(alone.rows[0], together.rows[1])
  np.testing.assert_array_equal(alone.unlucky[0], together.unlucky[1])
  assert not np.array_equal(together.rows[0], together.rows[1])


def test_a_shorter_run_meets_a_longer_runs_stream_only_when_drawn_for_its_length():
  """Catches pairing runs of different horizons by seed alone: the luck is drawn after all the
  mushrooms, so a 1,000-step run met other luck than the 3,000-step runs it was set beside."""
  longer = mushroom.EnvironmentStream.draw(np.array([0, 1]), 300, 8124)
  drawn_for_longer = mushroom.EnvironmentStream.draw(np.array([0, 1]), 100, 8124, drawn_for=300)
  np.testing.assert_array_equal(drawn_for_longer.rows, longer.rows[:, :100])
  np.testing.assert_array_equal(drawn_for_longer.unlucky, longer.unlucky[:, :100])
  own_length = mushroom.EnvironmentStream.draw(np.array([0, 1]), 100, 8124)
  np.testing.assert_array_equal(own_length.rows, longer.rows[:, :100])
  assert 0.3 < np.mean(own_length.unlucky == longer.unlucky[:, :100]) < 0.7
  with pytest.raises(UsageError, match="stream_horizon=50 is below horizon=100"):
    BanditConfig(horizon=100, stream_horizon=50).validate()


def _point_model(members: int):
  config = BanditConfig(hidden_units=8, num_hidden_layers=1, initial_noise_scale=1.0)
  model = reward_model(config, members, bayesian=False, seed=1, num_features=3)
  model(tf.zeros([members, 1, 4]))
  return model


@pytest.mark.parametrize("form", ["per_action", "action_input"])
def test_action_means_are_what_the_model_predicts_for_each_action(form):
  """Catches `action_means` pairing contexts with the wrong action, or splitting the stacked
  batch wrongly, in either reward model: it must agree with calling the model on (context,
  action) for every action."""
  config = BanditConfig(hidden_units=6, num_hidden_layers=1, reward_model=form)
  model = reward_model(config, 3, bayesian=False, seed=4, num_features=5)
  contexts = tf.random.stateless_normal([3, 7, 5], seed=[0, 1])
  means = model.action_means(contexts).numpy()
  for action in (0, 1):
    inputs = tf.concat([contexts, tf.fill([3, 7, 1], float(action))], -1)
    np.testing.assert_allclose(means[..., action], model(inputs)[..., 0].numpy(), rtol=1e-6)
  assert not np.allclose(means[..., 0], means[..., 1])


def test_each_member_learns_from_its_own_group_and_only_the_filled_rows():
  """Catches a grouped gather that mixes members' histories, and batches drawn beyond the
  history's count (the empty rows hold a reward of 1e3 here, which would dominate)."""
  members, groups, capacity = 4, 2, 40
  rewards = np.full([groups, capacity, 1], 1e3, np.float32)
  rewards[0, :10], rewards[1, :10] = 2.0, -3.0
  inputs = np.zeros([groups, capacity, 4], np.float32)
  inputs[..., -1] = 1.0   # action "eat" throughout
  count = tf.Variable(10, dtype=tf.int64)
  model = _point_model(members)
  loop = TrainingLoop(
      ElboObjective(model, gaussian_head_log_likelihood, kl_fn=lambda: tf.zeros([members])),
      GradientUpdate(Adam(model.trainable_variables)),
      GroupedBatches(tf.Variable(inputs), tf.Variable(rewards), 8, members, num_examples=count))
  loop.maximize(1500, 0.01)
  predicted = model(tf.constant(inputs[:, :1].repeat(2, axis=0)))[:, 0, 0].numpy()
  np.testing.assert_allclose(predicted, [2.0, 2.0, -3.0, -3.0], atol=0.2)


@pytest.mark.parametrize("settings", [LoopSettings(), LoopSettings(noise_chunk_steps=5),
                                      LoopSettings(jit_compile=True, noise_chunk_steps=5)],
                         ids=["per_step", "chunked", "compiled"])
def test_a_history_written_row_by_row_is_gathered_row_by_row(settings):
  """A history written through slices (as `History.append` writes it) is in TensorFlow's
  copy-on-read mode, where every whole read copies the store: the uncompiled loops read it whole
  at every step (1.7 ms of a 5,000-row store's 9-11 ms step). Catches a loop outside XLA that
  reads the data variable whole instead of gathering from it, and gathered steps that differ by
  a bit from steps on the same data given as tensors."""
  members, groups, capacity = 4, 2, 40
  rng = np.random.default_rng(0)
  inputs = rng.normal(size=[groups, capacity, 4]).astype(np.float32)
  rewards = rng.normal(size=[groups, capacity, 1]).astype(np.float32)
  traces, gather_ops = [], []
  for data in ("variables", "tensors"):
    model = _point_model(members)
    if data == "variables":
      stored = [tf.Variable(tf.zeros_like(inputs)), tf.Variable(tf.zeros_like(rewards))]
      for variable, values in zip(stored, (inputs, rewards)):
        for row in range(capacity):
          variable[:, row].assign(values[:, row])
    else:
      stored = [tf.constant(inputs), tf.constant(rewards)]
    loop = TrainingLoop(
        ElboObjective(model, gaussian_head_log_likelihood, kl_fn=lambda: tf.zeros([members])),
        GradientUpdate(Adam(model.trainable_variables)),
        GroupedBatches(*stored, 8, members, num_examples=tf.Variable(30, dtype=tf.int64)),
        loop_settings=settings)
    traces.append(loop.maximize(10, 0.01))
    indices = tf.zeros([members, 8], tf.int64)
    graph = tf.function(lambda: loop.batch_rows(loop.batches.inputs, indices)
                        ).get_concrete_function().graph
    gather_ops.append({op.type for op in graph.get_operations()})
  np.testing.assert_array_equal(traces[0], traces[1])
  if settings.jit_compile:   # XLA gathers no resources; it reads the buffer without a copy
    assert "ReadVariableOp" in gather_ops[0]
  else:
    assert "ResourceGatherNd" in gather_ops[0] and "ReadVariableOp" not in gather_ops[0]


def test_refinement_members_copy_their_seed_member():
  """S trained members go into r * S members, member m copying member m // r."""
  config = BanditConfig(hidden_units=5, num_hidden_layers=1)
  source = reward_model(config, 2, bayesian=True, seed=0, num_features=3)
  target = reward_model(config, 6, bayesian=True, seed=1, num_features=3)
  for model in (source, target):
    model(tf.zeros([model.noise.num_members, 1, 4]))
  for parameter in mean_field_parameters(source):
    parameter.posterior_loc.assign(tf.random.normal(parameter.posterior_loc.shape, seed=2))
  load_trained_state(source, target)
  for copied, original in zip(mean_field_parameters(target), mean_field_parameters(source)):
    np.testing.assert_array_equal(copied.posterior_loc.numpy(),
                                  np.repeat(original.posterior_loc.numpy(), 3, axis=0))


@pytest.mark.parametrize("agent_name", ["svgd_ts", "fsvgd_ts"])
def test_each_seeds_particles_learn_that_seeds_history(mushrooms, agent_name):
  """Seed 0 is always paid +5 for eating, seed 1 -5: each seed's particles must come to predict
  their own seed's reward for eating (and the seeds' particle sets not mix). Catches particles
  of one seed drawing another seed's rows, or one kernel over both seeds' particles."""
  config = BanditConfig(**dict(TINY, num_particles=4, update_steps=150, hidden_units=16,
                               learning_rate=1e-2))
  agent = make_agent(agent_name, config, mushroom.NUM_FEATURES)
  contexts = tf.constant(mushrooms.contexts[:2])
  eat = tf.constant([[mushroom.EAT], [mushroom.EAT]], tf.int32)
  for _ in range(10):
    agent.observe(contexts, eat, tf.constant([[5.0], [-5.0]]))
  assert agent.history.count.numpy() == 10 and agent.history.inputs.shape[0] == 2
  means = agent.model.action_means(tf.repeat(contexts, 4, axis=0)[:, tf.newaxis])[:, 0]
  eating = means.numpy()[:, mushroom.EAT].reshape(2, 4)
  np.testing.assert_allclose(eating[0], 5.0, atol=1.0)
  np.testing.assert_allclose(eating[1], -5.0, atol=1.0)
  chosen = agent.choose(contexts, tf.constant(10, tf.int64)).numpy()
  np.testing.assert_array_equal(chosen[:, 0], [mushroom.EAT, 1 - mushroom.EAT])


def test_epsilon_one_explores_uniformly_and_zero_never(mushrooms):
  config = BanditConfig(**dict(TINY, seeds=tuple(range(40))))
  agent = make_agent("eps_greedy", config, mushroom.NUM_FEATURES)
  contexts = tf.constant(mushrooms.contexts[:40])
  greedy = agent.model.action_means(
      tf.repeat(contexts, 2, axis=0)[:, tf.newaxis])[:, 0].numpy().argmax(-1).reshape(40, 2)
  chosen = np.stack([agent.choose(contexts, tf.constant(step, tf.int64)).numpy()
                     for step in range(25)])
  np.testing.assert_array_equal(chosen[:, :, 0], np.broadcast_to(greedy[:, 0], (25, 40)))
  assert 0.4 < np.mean(chosen[:, :, 1]) < 0.6


@pytest.fixture(scope="module")
def paper_agents_run(tmp_path_factory, data_dir_for):
  """The binary's run of the paper's three agents at TINY's settings (the noise scale learned):
  (its metrics, its output folder). Two tests read it; nothing writes to it after the run."""
  output_dir = tmp_path_factory.mktemp("paper_agents")
  config = BanditConfig(**TINY, data_dir=data_dir_for("mushroom"))
  return bandit_main.train_and_evaluate(config, str(output_dir)), output_dir


@pytest.fixture(scope="module")
def stream_horizon_run(tmp_path_factory, data_dir_for):
  """The binary's run of eps_greedy (exploring at every step) for 40 steps of the stream drawn
  for 120, with the noise scale fixed at 2: (its config, its output folder). Two tests read it."""
  output_dir = tmp_path_factory.mktemp("stream_horizon")
  config = BanditConfig(**dict(TINY, agents=("eps_greedy",), epsilons=(1.0,), horizon=40,
                               stream_horizon=120, noise_scale="2",
                               data_dir=data_dir_for("mushroom")))
  bandit_main.train_and_evaluate(config, str(output_dir))
  return config, output_dir


def test_binary_writes_figure_table_and_results(paper_agents_run):
  metrics, tmp_path = paper_agents_run
  recorded = json.loads((tmp_path / "results.json").read_text())
  lines = ["refined_ts", "vi_ts", "eps_greedy_0", "eps_greedy_1"]
  assert sorted(recorded["metrics"]["cumulative_regret"]) == sorted(lines)
  assert recorded["metrics"]["seeds"] == [0, 1]
  for line in lines:
    per_seed = metrics["cumulative_regret_per_seed"][line]
    assert metrics["cumulative_regret"][line] == pytest.approx(np.mean(per_seed))
    assert list(metrics["regret_at_steps"][line]) == ["5", "10", "12"]
    assert 0 <= metrics["cumulative_regret"][line] <= 12 * 15
  for name in ("figure5_cumulative_regret.png", "figure5_cumulative_regret.md",
               "regret_refined_ts.npz"):
    assert (tmp_path / name).exists()
  assert "| refined_ts |" in (tmp_path / "figure5_cumulative_regret.md").read_text()


def test_the_binary_meets_the_stream_drawn_for_stream_horizon(stream_horizon_run, mushrooms):
  """Catches --stream_horizon accepted but not passed to the stream: the 40 steps would meet
  their own luck, not that of the 120-step stream (some 20 poisonous mushrooms eaten, each with
  even odds of other luck). (The noise scale, fixed for test_results_record_the_noise_model_and_
  the_learned_scales, plays no part: the agent explores at every step.)"""
  config, tmp_path = stream_horizon_run
  record = RegretRecord.load(str(tmp_path / "regret_eps_greedy.npz"))
  stream = mushroom.EnvironmentStream.draw(np.array(config.seeds), 120, len(mushrooms.edible))
  edible = mushrooms.edible[stream.rows[:, None, :40]]
  np.testing.assert_array_equal(
      record.rewards, mushroom.rewards(edible, stream.unlucky[:, None, :40], record.actions))


def test_results_record_the_noise_model_and_the_learned_scales(paper_agents_run,
                                                               stream_horizon_run):
  """Catches results.json without the final learned scale per seed (the diagnosis of a failed run
  starts from it), or with one where the scale was fixed. (The two runs above: the scales are
  recorded, or not, for the run as a whole; one agent is enough for the fixed scale.)"""
  for noise_scale, (_, out) in (("learned", paper_agents_run), ("2", stream_horizon_run)):
    recorded = json.loads((out / "results.json").read_text())
    assert recorded["flags"]["noise_scale"] == noise_scale
    scales = recorded["metrics"].get("final_noise_scale_per_seed")
    if noise_scale == "2":
      assert scales is None
      continue
    assert sorted(scales) == ["eps_greedy_0", "eps_greedy_1", "refined_ts", "vi_ts"]
    assert all(len(values) == 2 and all(v > 0 for v in values) for values in scales.values())
    for agent in ("refined_ts", "vi_ts"):
      record = RegretRecord.load(str(out / f"regret_{agent}.npz"))
      assert record.predicted_gap.shape == (2, 1, 12) and np.all(np.isfinite(record.predicted_gap))


def _bandit_run_dir(path, seeds, refine_steps=500, agent="refined_ts"):
  """A finished run's files as bandits.main leaves them: the regret record and results.json."""
  os.makedirs(path)
  rng = np.random.default_rng(seeds[0])
  shape = (len(seeds), 1, 7)
  RegretRecord(line_names=[agent], seeds=list(seeds), actions=rng.integers(0, 2, shape),
               rewards=rng.normal(size=shape), expected_regret=rng.random(shape),
               realised_regret=rng.random(shape), seconds=10.0
               ).save(os.path.join(path, f"regret_{agent}.npz"))
  flags = {**BanditConfig().as_dict(), "seeds": list(seeds), "refine_steps": refine_steps}
  (path / "results.json").write_text(json.dumps({"flags": flags}))
  return RegretRecord.load(os.path.join(path, f"regret_{agent}.npz"))


def test_an_agents_runs_over_different_seeds_become_one_line(tmp_path):
  """Catches a figure that draws each per-seed run of refined_ts (too slow to run all seeds in
  one session) as its own line, mixes runs of different settings, or counts a seed twice."""
  late = _bandit_run_dir(tmp_path / "late", [3])
  early = _bandit_run_dir(tmp_path / "early", [0, 1])
  _bandit_run_dir(tmp_path / "other_agent", [0], agent="vi_ts")
  records = bandit_figure.records_in([str(tmp_path / name)
                                      for name in ("late", "other_agent", "early")])
  assert [record.line_names for record in records] == [["refined_ts"], ["vi_ts"]]
  merged = records[0]
  assert merged.seeds == [0, 1, 3] and merged.seconds == 20.0
  for name in ("actions", "rewards", "expected_regret", "realised_regret"):
    np.testing.assert_array_equal(
        getattr(merged, name), np.concatenate([getattr(early, name), getattr(late, name)]))
  table = bandit_figure.regret_table(records, report_interval=7)
  assert "| refined_ts | 0,1,3 |" in table and "| vi_ts | 0 |" in table
  bandit_figure.draw_figure(records, str(tmp_path / "figure.png"))   # lines of unequal seeds
  assert (tmp_path / "figure.png").exists()
  _bandit_run_dir(tmp_path / "again", [1, 2])
  with pytest.raises(ValueError, match="repeat"):
    bandit_figure.records_in([str(tmp_path / "early"), str(tmp_path / "again")])
  _bandit_run_dir(tmp_path / "shorter", [4], refine_steps=50)
  completed = subprocess.run(
      [sys.executable, "-m", "bandits.figure", f"--run_dirs={tmp_path / 'late'},"
       f"{tmp_path / 'shorter'}", f"--output_dir={tmp_path / 'figure'}"],
      capture_output=True, text=True, cwd=REPO, check=False)
  assert completed.returncode == 2
  last_line = completed.stderr.strip().splitlines()[-1]
  assert "refined_ts runs differ in --refine_steps: 500" in last_line
  assert not (tmp_path / "figure").exists()


def test_the_figure_and_the_regret_sources_run_without_tensorflow(tmp_path):
  """Both binaries read .npz records and write tables: they run to the end without loading
  TensorFlow. Catches the record's module (`bandits.regret_record`) importing TensorFlow again,
  as `bandits.interaction`, where it lived, does: each run took 5-8 s longer, and the tests
  around this one run the two binaries five times."""
  _bandit_run_dir(tmp_path / "run", [0, 1], agent="vi_ts")
  RegretRecord(line_names=["vi_ts"], seeds=[0, 1], actions=np.array([[[1, 1, 0, 0, 1, 0, 1]]] * 2),
               rewards=np.zeros([2, 1, 7]),
               expected_regret=np.array([[[15, 0, 5, 0, 0, 0, 15]]] * 2, np.float32),
               realised_regret=np.zeros([2, 1, 7]), seconds=1.0
               ).save(str(tmp_path / "run" / "regret_vi_ts.npz"))    # regrets the reports accept
  # The binaries end by os._exit (runner.cli.run): the probe says what was loaded there.
  probe = ("import os, runpy, sys\n"
           "module, leave = sys.argv.pop(1), os._exit\n"
           "def report_then_leave(code):\n"
           "  print('tensorflow' in sys.modules, flush=True)\n"
           "  leave(code)\n"
           "os._exit = report_then_leave\n"
           "runpy.run_module(module, run_name='__main__', alter_sys=True)")
  for module, written in (("bandits.figure", "figure5_cumulative_regret.md"),
                          ("report.bandit_regret_sources", "regret_sources.md")):
    completed = subprocess.run(
        [sys.executable, "-c", probe, module, f"--run_dirs={tmp_path / 'run'}",
         f"--output_dir={tmp_path / module}"],
        capture_output=True, text=True, cwd=REPO, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().splitlines()[-1] == "False", module
    assert (tmp_path / module / written).exists(), module


def test_a_corrupt_regret_record_is_one_runtime_line_and_nothing_written(tmp_path):
  """Catches a traceback (zipfile's or numpy's) from a record cut short or overwritten, and a
  record whose arrays disagree being read as if it held its seeds' regrets."""
  record = _bandit_run_dir(tmp_path / "run", [0, 1], agent="vi_ts")
  path = tmp_path / "run" / "regret_vi_ts.npz"
  whole = path.read_bytes()
  middle = len(whole) // 2
  path.write_bytes(whole[:middle] + bytes(b ^ 0xFF for b in whole[middle:middle + 40])
                   + whole[middle + 40:])        # zlib's error, not zipfile's
  with pytest.raises(RuntimeError, match="regret_vi_ts.npz is not a regret record"):
    RegretRecord.load(str(path))
  path.write_bytes(whole[:200])
  with pytest.raises(RuntimeError, match="regret_vi_ts.npz is not a regret record"):
    RegretRecord.load(str(path))
  for module in ("bandits.figure", "report.bandit_regret_sources"):
    completed = subprocess.run(
        [sys.executable, "-m", module, f"--run_dirs={tmp_path / 'run'}",
         f"--output_dir={tmp_path / module}"],
        capture_output=True, text=True, cwd=REPO, check=False)
    assert completed.returncode == 1, module
    last_line = completed.stderr.strip().splitlines()[-1]
    assert "Traceback" not in completed.stderr and str(path) in last_line, module
    assert not (tmp_path / module).exists()
  dataclasses.replace(record, actions=record.actions[:1]).save(str(path))
  with pytest.raises(RuntimeError, match="shapes"):
    RegretRecord.load(str(path))


@pytest.mark.parametrize("agent_name,loop", [
    ("refined_ts", LoopSettings(noise_chunk_steps=100)), ("eps_greedy", LoopSettings()),
    ("fsvgd_ts", LoopSettings())])
def test_a_killed_run_resumes_exactly(tmp_path, mushrooms, agent_name, loop):
  """Catches a checkpoint that misses part of the state (history, optimiser moments, the noise
  and batch counters, the record): the resumed run would diverge from the uninterrupted one.
  refined_ts with noise drawn ahead in chunks, as the binary's default loop draws it (the binary
  also compiles the chunks with XLA, which holds no state of its own and gives the plain chunks'
  numbers: test_loop_settings; compiling tripled this case's time; its per-step loop's case took
  as long again). The other two run per step. One hidden layer: its three agents' loops trace
  faster, and hold the same kinds of state."""
  config = BanditConfig(**{**TINY, "num_hidden_layers": 1, "jit_compile": loop.jit_compile,
                           "noise_chunk_steps": loop.noise_chunk_steps})
  _kill_and_resume(tmp_path, mushrooms, agent_name, config)


def _kill_and_resume(tmp_path, mushrooms, agent_name, config):
  """The uninterrupted run leaves its checkpoint folder copied as it stands after the checkpoint
  at step 5, before the one at 10 (as a run killed there leaves it: the run writes nothing else
  in between); a fresh agent resumes from the copy. (A second run killed at that point wrote the
  same files, and cost a third of the test: another agent built, traced and compiled.)"""
  stream = mushroom.EnvironmentStream.draw(np.array(config.seeds), config.horizon, 8124)
  uninterrupted = make_agent(agent_name, config, mushroom.NUM_FEATURES)
  observe, calls = uninterrupted.observe, []

  def observe_after_copying(*args):
    calls.append(1)
    if len(calls) == 8:     # after the checkpoint at step 5, before the one at 10
      shutil.copytree(tmp_path / "whole", tmp_path / "killed")
    return observe(*args)
  uninterrupted.observe = observe_after_copying
  whole = interact(uninterrupted, mushrooms, stream, config, str(tmp_path / "whole"))
  assert len(calls) == config.horizon and (tmp_path / "killed").is_dir()
  restarted = make_agent(agent_name, config, mushroom.NUM_FEATURES)
  resumed = interact(restarted, mushrooms, stream, config, str(tmp_path / "killed"))
  np.testing.assert_array_equal(resumed.actions, whole.actions)
  np.testing.assert_array_equal(resumed.rewards, whole.rewards)
  assert whole.actions.std() > 0   # a run that never varies would pass trivially
  # Binary actions are a coarse check: the trained weights must agree bit for bit as well.
  for resumed_variable, whole_variable in zip(restarted.variables, uninterrupted.variables):
    np.testing.assert_array_equal(resumed_variable.numpy(), whole_variable.numpy())


def _run(*flags):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "bandits.main", *flags], cwd=REPO,
                        capture_output=True, text=True, env=env, timeout=300)


BAD_FLAGS = [
    (["--agents=thompson"], 2, "agents='thompson' is not allowed"),
    (["--epsilons=0.1,1.5"], 2, "epsilons=1.5 is out of range"),
    (["--horizon=0"], 2, "horizon=0 is out of range"),
    (["--update_steps=0"], 2, "update_steps=0 is out of range"),
    (["--num_particles=1"], 2, "num_particles=1 is out of range; allowed: >= 2"),
    (["--initial_noise_scale=0"], 2, "initial_noise_scale=0.0 is out of range; allowed: > 0.001"),
    # Compiled by default: per-step draws need --nojit_compile, and the line says so.
    (["--noise_chunk_steps=0"], 2, "--jit_compile needs the noise drawn ahead of the compiled "
     "steps; allowed: --noise_chunk_steps > 0 (e.g. 100) with it, or --nojit_compile"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The binary's runs with each of BAD_FLAGS, made together."""
  return UsageRuns.in_output_dirs("bandits.main", tmp_path_factory.mktemp("refusals"),
                                  [flags for flags, _, _ in BAD_FLAGS],
                                  environment={"TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("flags, status, message", BAD_FLAGS)
def test_bad_flags_give_one_line_and_no_results(refusals, flags, status, message):
  completed, output_dir = refusals.in_output_dir(*flags)
  assert completed.returncode == status
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
  assert not output_dir.exists()


def test_a_corrupt_mushroom_file_is_a_runtime_error_without_results(tmp_path):
  """A local copy is checksummed before it is parsed: a truncated file stops the run in one line
  (`mushroom.parse`'s own checks name the line of a file that passes, see above)."""
  data = tmp_path / "data" / "mushroom"
  data.mkdir(parents=True)
  (data / "agaricus-lepiota.data").write_text("e,x,s\n")
  output = tmp_path / "out"
  completed = _run(f"--output_dir={output}", f"--data_dir={tmp_path / 'data'}", "--nodownload",
                   "--horizon=2")
  assert completed.returncode == 1
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and "checksum mismatch" in lines[0]
  assert not (output / "results.json").exists()


def test_sample_quality_scores_acting_on_a_sample():
  """Regret of acting on predicted eat rewards: eat when the prediction beats passing (0)."""
  edible = np.array([True, True, False, False])
  regret, squared_error = sample_quality._regret_and_errors(
      np.array([[3.0, -1.0, 2.0, -4.0]]), edible)
  np.testing.assert_allclose(regret, [[0.0, mushroom.REWARD_EDIBLE,
                                       -mushroom.EXPECTED_REWARD_POISONOUS, 0.0]])
  truth = np.array([5.0, 5.0] + [mushroom.EXPECTED_REWARD_POISONOUS] * 2)
  np.testing.assert_allclose(squared_error, [(np.array([3.0, -1.0, 2.0, -4.0]) - truth) ** 2])


def test_sample_quality_binary_learns_from_its_history(tmp_path, mushrooms, data_dir_for):
  """Both kinds of samples, trained on 400 random-action rewards, act better than passing every
  mushroom (regret 5 x the edible fraction), the best policy blind to edibility; catches samples
  scored against the wrong mushrooms or before training (acting on an untrained network eats
  about half of the mushrooms: regret near 5). Four seeds, because at this size one seed's
  regret varies from 0.6 to 1.0 of passing's."""
  config = sample_quality.SampleQualityConfig(
      **dict(TINY, seeds=(0, 1, 2, 3), hidden_units=32, num_observations=400,
             data_dir=data_dir_for("mushroom"),
             training_steps=3000, refine_steps=20, rounds=2))
  metrics = sample_quality.train_and_evaluate(config, str(tmp_path))
  always_pass = mushroom.REWARD_EDIBLE * np.mean(mushrooms.edible)
  for agent in ("vi_ts", "refined_ts"):
    # (Measured: 2.26 for vi_ts and 2.06 for refined_ts, against 2.59.)
    assert metrics[agent]["averaged_regret"]["mean"] < always_pass, agent
    assert metrics[agent]["one_sample_regret"]["mean"] < always_pass, agent
    assert metrics[agent]["eat_reward_spread"]["mean"] > 0
  assert json.loads((tmp_path / "results.json").read_text())["method"] == "sample_quality"


def test_regret_sources_split_each_seeds_regret_into_its_two_mistakes(tmp_path):
  """From a record made by the environment's own reward functions: the counts of poisonous
  mushrooms eaten and edible ones passed are the direct counts, their regret adds up to the
  cumulative regret (whole run and second half), and an agent that stopped eating shows as
  every edible mushroom passed. Catches the two regrets swapped (planted: 5 for poisonous
  eaten; fails) and a second half taken from the wrong end."""
  from report import bandit_regret_sources
  rng = np.random.default_rng(0)
  steps = 40
  edible = rng.random([2, steps]) < 0.5
  explorer = rng.integers(0, 2, [steps])
  never_eats = np.zeros(steps, np.int64)
  actions = np.stack([explorer, never_eats])[:, np.newaxis]          # [seeds, lines, steps]
  optimal = mushroom.expected_rewards(edible, mushroom.optimal_actions(edible))
  regret = (optimal - mushroom.expected_rewards(edible, actions[:, 0]))[:, np.newaxis]
  record = RegretRecord(line_names=["vi_ts"], seeds=[0, 1], actions=actions,
                        rewards=np.zeros(actions.shape), expected_regret=regret,
                        realised_regret=regret, seconds=1.0)
  rows = bandit_regret_sources.regret_sources([record], second_half_from=30)
  for row, seed_actions, seed_edible in zip(rows, actions[:, 0], edible):
    eaten = seed_actions == mushroom.EAT
    assert row["whole"]["poisonous_eaten"] == np.sum(eaten & ~seed_edible)
    assert row["whole"]["edible_passed"] == np.sum(~eaten & seed_edible)
    assert row["second_half"]["poisonous_eaten"] == np.sum((eaten & ~seed_edible)[30:])
    assert row["second_half"]["edible_passed"] == np.sum((~eaten & seed_edible)[30:])
    assert row["whole"]["regret"] == pytest.approx(row["cumulative_regret"])
    assert row["second_half"]["regret"] == pytest.approx(regret[row["seed"], 0, 30:].sum())
  assert rows[1]["whole"]["eaten"] == 0 and rows[1]["whole"]["edible_passed"] == edible[1].sum()
  table = bandit_regret_sources.regret_sources_table(rows)
  assert "| vi_ts | 1 |" in table and "from step 31" in table
  summary = bandit_regret_sources.line_summary_table(rows)
  assert summary.splitlines()[-1].startswith("| vi_ts | 0,1 |")
  assert summary.splitlines()[-1].endswith("| 1 of 2 (1) |")   # seed 1 never eats
  with pytest.raises(ValueError, match="expected regret 3.0 for action"):
    bandit_regret_sources.mistakes(np.array([1]), np.array([3.0]))
  corrupt = RegretRecord(line_names=["vi_ts"], seeds=[4], actions=np.ones([1, 1, 2], np.int64),
                         rewards=np.zeros([1, 1, 2]), expected_regret=np.full([1, 1, 2], 3.0),
                         realised_regret=np.zeros([1, 1, 2]), seconds=1.0)
  with pytest.raises(ValueError, match="vi_ts, seed 4: step 1: expected regret 3.0"):
    bandit_regret_sources.regret_sources([corrupt])
  with pytest.raises(ValueError, match="horizons differ"):
    bandit_regret_sources.regret_sources([record, corrupt])


def test_regret_sources_binary_writes_its_table_and_refuses_a_step_past_the_horizon(tmp_path):
  path = tmp_path / "run"
  _bandit_run_dir(path, [0, 1], agent="vi_ts")                  # 7 steps
  actions = np.array([[[1, 1, 0, 0, 1, 0, 1]]] * 2)
  RegretRecord(line_names=["vi_ts"], seeds=[0, 1], actions=actions, rewards=np.zeros([2, 1, 7]),
               expected_regret=np.array([[[15, 0, 5, 0, 0, 0, 15]]] * 2, np.float32),
               realised_regret=np.zeros([2, 1, 7]), seconds=1.0
               ).save(str(path / "regret_vi_ts.npz"))
  command = [sys.executable, "-m", "report.bandit_regret_sources", f"--run_dirs={path}",
             f"--output_dir={tmp_path / 'sources'}"]
  completed = subprocess.run(command + ["--second_half_from=7"], capture_output=True, text=True,
                             cwd=REPO, check=False)
  assert completed.returncode == 2
  assert completed.stderr.strip().splitlines()[-1] == (
      "error: --second_half_from=7 must be in [0, 7)")
  assert not (tmp_path / "sources").exists()
  completed = subprocess.run(command + ["--second_half_from=3"], capture_output=True, text=True,
                             cwd=REPO, check=False)
  assert completed.returncode == 0, completed.stderr[-1000:]
  rows = json.loads((tmp_path / "sources" / "regret_sources.json").read_text())["rows"]
  assert [(row["seed"], row["whole"]["poisonous_eaten"], row["second_half"]["edible_passed"])
          for row in rows] == [(0, 2, 0), (1, 2, 0)]
  # Its two seeds' rows, the line's summary, then each seed's four quarters.
  assert (tmp_path / "sources" / "regret_sources.md").read_text().count("| vi_ts |") == 3 + 8
  quarters = json.loads((tmp_path / "sources" / "regret_sources.json").read_text())["quarters"]
  assert [(row["seed"], row["part"]) for row in quarters][:5] == [(0, 1), (0, 2), (0, 3), (0, 4),
                                                                  (1, 1)]
