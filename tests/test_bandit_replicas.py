"""The bandit on the hardware flags: 2 replicas (2 logical CPUs) act as one device does.

The CPU is split into logical devices before TensorFlow starts, so the runs are subprocesses.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# refined_ts updates q with the very loop vi_ts does (`Agent.observe`, Bayesian) and then refines;
# eps_greedy is the point network's loop: so vi_ts, a third of each run, adds no path of its own.
TINY = ["--seeds=0,1", "--horizon=16", "--update_steps=16", "--refine_steps=16",
        "--steps_per_checkpoint=16", "--noise_scale=1", "--hidden_units=16", "--nodownload",
        "--agents=refined_ts,eps_greedy", "--epsilons=0.1"]


def _bandit(output_dir, *flags, cpu_devices: int = 2) -> subprocess.CompletedProcess:
  """The binary on one intra-op thread, set by its flag (not $TF_NUM_INTRAOP_THREADS, which the
  runs must not need)."""
  environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1",
                 "REFINED_VI_TEST_CPU_DEVICES": str(cpu_devices)}
  environment.pop("TF_NUM_INTRAOP_THREADS", None)
  return subprocess.run([sys.executable, "-m", "bandits.main", f"--output_dir={output_dir}",
                         *TINY, "--intra_op_threads=1", *flags], cwd=REPO, capture_output=True,
                        text=True, timeout=600, env=environment)


def test_two_replicas_take_one_devices_actions_rewards_and_regret(tmp_path, data_dir_for):
  """refined_ts's and eps_greedy's actions, rewards and regret on 2 replicas (each update's and
  refinement's minibatch split over them) equal one uncompiled device's, and the predicted eat -
  pass gaps agree to round-off. Catches: the history's rows appended on one replica only (the
  mirrored copies diverge), the likelihood summed over replicas instead of averaged, the
  minibatch not split. The gaps' round-off grows over the hundreds of Adam steps (measured: up
  to 0.009 in gaps of 0.1-10). Also catches --intra_op_threads accepted by the bandit binary but
  not applied (recorded as TensorFlow's choice, 0)."""
  data = f"--data_dir={data_dir_for('mushroom')}"
  one = _bandit(tmp_path / "one", data, "--nojit_compile")
  assert one.returncode == 0, one.stderr[-2000:]
  two = _bandit(tmp_path / "two", data, "--use_gpu", "--num_cores=2")
  assert two.returncode == 0, two.stderr[-2000:]
  for run in ("one", "two"):
    assert json.loads((tmp_path / run / "results.json").read_text())["machine"][
        "intra_op_threads"] == 1, run
  for agent in ("refined_ts", "eps_greedy"):
    with np.load(tmp_path / "one" / f"regret_{agent}.npz") as a, \
         np.load(tmp_path / "two" / f"regret_{agent}.npz") as b:
      np.testing.assert_array_equal(a["actions"], b["actions"], err_msg=agent)
      np.testing.assert_array_equal(a["rewards"], b["rewards"], err_msg=agent)
      np.testing.assert_array_equal(a["expected_regret"], b["expected_regret"], err_msg=agent)
      np.testing.assert_allclose(a["predicted_gap"], b["predicted_gap"], rtol=1e-2, atol=2e-2,
                                 err_msg=agent)
      assert a["actions"].min() != a["actions"].max(), "the runs never both ate and passed"


@pytest.mark.parametrize("flags,message", [
    (["--use_bfloat16"], "--use_bfloat16 is not supported"),
    (["--use_gpu", "--num_cores=2", "--batch_size=63"],
     "--batch_size=63 does not split evenly over 2 replicas; allowed: a multiple of 2"),
    (["--num_cores=2"], "--num_cores=2 needs --use_gpu, --tpu or --multi_worker"),
])
def test_hardware_flags_that_do_not_fit_the_bandit_are_one_line(tmp_path, data_dir_for, flags,
                                                                message):
  """Each one line, exit 2 (the strategy's checks come after the data file is found)."""
  completed = _bandit(tmp_path / "out", f"--data_dir={data_dir_for('mushroom')}", *flags)
  assert completed.returncode == 2, completed.stderr[-2000:]
  assert message in completed.stderr
  assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
  assert not (tmp_path / "out" / "results.json").exists()
