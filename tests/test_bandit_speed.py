"""benchmarks.bandit_speed: every requested agent timed under every requested loop, one file."""
import json
import os
import subprocess
import sys

import pytest

from tests.usage_runs import UsageRuns

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, *flags):
  return subprocess.run(
      [sys.executable, "-m", "benchmarks.bandit_speed", f"--output_dir={tmp_path}", *flags],
      capture_output=True, text=True, check=False, cwd=REPO,
      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def test_both_loops_time_each_agent_and_the_rows_add_up(tmp_path, data_dir_for):
  """Tiny settings. Catches agents built outside their loop's settings (the compiled row would
  time the per-step loop), a loop or agent left out of the record, a refinement time missing
  for refined_ts, and projected hours that do not follow from the measured steps per second.
  eps_greedy beside refined_ts: the point network's loop traces faster than vi_ts's, which
  refined_ts runs for its own updates anyway."""
  completed = _run(tmp_path, f"--data_dir={data_dir_for('mushroom')}", "--steps=1", "--rounds=1",
                   "--history=2", "--update_steps=10", "--refine_steps=10",
                   "--agents=eps_greedy,refined_ts", "--horizon=3600", "--seeds=3")
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert results["flags"]["loops"] == ["per_step", "compiled"]
  assert results["flags"]["seeds"] == [3]
  for loop in ("per_step", "compiled"):
    rows = results["metrics"][loop]
    assert set(rows) == {"eps_greedy", "refined_ts", "all_agents_projected_hours"}
    for row in (rows["eps_greedy"], rows["refined_ts"]):
      assert row["update_loop_compiled"] == (loop == "compiled")
      assert row["update_ms_per_adam_step"] > 0
      assert row["projected_hours_for_horizon"] == pytest.approx(
          1 / row["bandit_steps_per_second"])     # 3,600 steps at that speed
    assert rows["refined_ts"]["refine_ms_per_adam_step"] > 0
    assert rows["all_agents_projected_hours"] == pytest.approx(
        rows["eps_greedy"]["projected_hours_for_horizon"]
        + rows["refined_ts"]["projected_hours_for_horizon"])
  assert "| compiled | refined_ts |" in (tmp_path / "speed.md").read_text()


BAD_FLAGS = [
    (["--loops=per_step,fast"], "--loops=per_step,fast: allowed: some of per_step, compiled"),
    (["--agents=vi_ts,greedy"], "--agents=vi_ts,greedy: allowed: some of refined_ts"),
    (["--steps=0"], "steps=0 must be >= 1"),
    (["--seeds=0,-1"], "--seeds=0,-1: allowed: non-negative integers"),
    (["--seeds=1,1"], "seeds=1,1 repeats a value"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The benchmark's runs with each of BAD_FLAGS, made together."""
  return UsageRuns.in_output_dirs("benchmarks.bandit_speed", tmp_path_factory.mktemp("refusals"),
                                  [flags for flags, _ in BAD_FLAGS],
                                  environment={"TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("flags,message", BAD_FLAGS)
def test_bad_flags_are_one_line_and_write_nothing(refusals, flags, message):
  completed, output_dir = refusals.in_output_dir(*flags)
  assert completed.returncode == 2
  assert message in completed.stderr.strip().splitlines()[-1]
  assert not output_dir.exists()


def test_the_flags_are_checked_before_tensorflow_loads():
  """Importing the benchmark loads neither TensorFlow nor the agents, so the usage errors above
  come at once (they took 5-6 s each when it loaded them first)."""
  probe = subprocess.run(
      [sys.executable, "-c", "import sys, benchmarks.bandit_speed; "
       "print('tensorflow' in sys.modules)"],
      capture_output=True, text=True, check=False, cwd=REPO)
  assert probe.returncode == 0 and probe.stdout.strip() == "False", probe.stderr
