"""--initial_pulls: every seed pulls each action a few times before its agent chooses, and the
agent learns from those rewards as from its own choices."""
import os
import subprocess
import sys

import numpy as np
import pytest

from bandits import mushroom
from bandits.agents import make_agent
from bandits.config import BanditConfig
from bandits.interaction import interact

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = dict(seeds=(0, 1, 2), horizon=7, update_steps=3, refine_steps=3, hidden_units=8,
            num_hidden_layers=1, epsilons=(0.0,), steps_per_checkpoint=100,
            regret_report_interval=7, download=False, jit_compile=False, noise_chunk_steps=0,
            noise_scale="0.5")


@pytest.mark.parametrize("agent_name", ["vi_ts", "eps_greedy"])
def test_the_first_steps_pull_pass_and_eat_in_turn_and_the_agent_learns_from_them(
    tmp_path, mushrooms, agent_name):
  """With --initial_pulls=2 every seed passes, eats, passes, eats, then its agent chooses; the
  rewards recorded are what those actions earn, and the agent's history holds those actions.

  Catches: the forced actions recorded but the agent updated on its own choices (its history's
  action column would differ), and the pulls not made at all (the agents' own first choices are
  not this pattern for every seed)."""
  config = BanditConfig(**TINY, initial_pulls=2)
  stream = mushroom.EnvironmentStream.draw(np.array(config.seeds), config.horizon, 8124)
  agent = make_agent(agent_name, config, mushroom.NUM_FEATURES)
  record = interact(agent, mushrooms, stream, config, str(tmp_path / "pulled"))
  forced = [mushroom.PASS, mushroom.EAT, mushroom.PASS, mushroom.EAT]
  assert (record.actions[:, :, :4] == forced).all()
  edible = mushrooms.edible[stream.rows]
  paid = mushroom.rewards(edible[:, None, :], stream.unlucky[:, None, :], record.actions)
  np.testing.assert_array_equal(record.rewards, paid)
  history_actions = agent.history.inputs.numpy()[:, :config.horizon, -1]
  np.testing.assert_array_equal(history_actions, record.actions[:, 0, :])
  # Without the pulls the agents' own first four choices are not this pattern on every seed.
  free = interact(make_agent(agent_name, BanditConfig(**TINY), mushroom.NUM_FEATURES), mushrooms,
                  stream, BanditConfig(**TINY), str(tmp_path / "free"))
  assert not (free.actions[:, :, :4] == forced).all()


def test_a_negative_count_is_one_usage_line_and_nothing_written(tmp_path):
  completed = subprocess.run(
      [sys.executable, "-m", "bandits.main", f"--output_dir={tmp_path / 'out'}",
       "--initial_pulls=-1"], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 2
  assert "initial_pulls=-1 is out of range; allowed: >= 0" in completed.stderr
  assert not (tmp_path / "out").exists()
