"""benchmarks.numerics_fingerprint: its comparison (benchmarks.fingerprint_comparison) passes only
identical fingerprints, naming the run and metric that differ, and its runs
(benchmarks.fingerprint_runs) record every number of their results.json."""
import copy
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import fingerprint_runs
from benchmarks import numerics_fingerprint as fingerprint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fingerprint(**runs):
  return {"git_commit": "abc", "date": "today", "runs": runs}


BEFORE = _fingerprint(**{
    "uci/boston_housing/vi/seed_0": {"command": "python -m uci.main", "metrics": {
        "test_mll": -2.577157735824585, "test_rmse": 3.0254852771759033, "num_train": 405,
        "elbo": float("nan")}, "flags": {"vi_steps": 30000}},
    "bandit_tiny/mushroom/noise_learned/vi_ts": {"command": "python -m bandits.main", "metrics": {
        "cumulative_regret/vi_ts": 12.5,
        "regret_record/vi_ts/seed_0/cumulative_expected_regret": [0.0, 5.0, 5.0, 10.0]}}})


def _write(tmp_path, name, payload):
  path = tmp_path / name
  path.write_text(json.dumps(payload))
  return str(path)


def _compare(tmp_path, before, after, *flags):
  return subprocess.run(
      [sys.executable, "-m", "benchmarks.numerics_fingerprint",
       f"--compare={_write(tmp_path, 'before.json', before)},"
       f"{_write(tmp_path, 'after.json', after)}", *flags],
      cwd=REPO, capture_output=True, text=True, timeout=120)


def test_identical_fingerprints_pass_and_say_identical(tmp_path):
  completed = _compare(tmp_path, BEFORE, copy.deepcopy(BEFORE))
  assert completed.returncode == 0, completed.stderr
  assert "6 metrics of 2 runs: 6 identical, 0 beyond the tolerance 0" in completed.stdout
  assert "| uci/boston_housing/vi/seed_0 | test_mll | -2.577157735824585 | -2.577157735824585 " \
         "| identical |" in completed.stdout


def test_one_changed_digit_fails_naming_run_and_metric(tmp_path):
  after = copy.deepcopy(BEFORE)
  after["runs"]["uci/boston_housing/vi/seed_0"]["metrics"]["test_mll"] = -2.577157735824586
  completed = _compare(tmp_path, BEFORE, after)
  assert completed.returncode == 1
  assert "1 row(s) differ" in completed.stderr
  assert "uci/boston_housing/vi/seed_0 test_mll" in completed.stderr
  assert "| uci/boston_housing/vi/seed_0 | test_mll | -2.577157735824585 | -2.577157735824586 " \
         "| 3.45e-16 |" in completed.stdout
  # Within a tolerance it passes.
  assert _compare(tmp_path, BEFORE, after, "--tolerance=1e-12").returncode == 0


def test_a_changed_step_of_a_series_fails(tmp_path):
  after = copy.deepcopy(BEFORE)
  series = "regret_record/vi_ts/seed_0/cumulative_expected_regret"
  after["runs"]["bandit_tiny/mushroom/noise_learned/vi_ts"]["metrics"][series][2] = 5.5
  completed = _compare(tmp_path, BEFORE, after)
  assert completed.returncode == 1
  assert f"bandit_tiny/mushroom/noise_learned/vi_ts {series}" in completed.stderr


@pytest.mark.parametrize("side", ["before", "after"])
def test_a_run_missing_on_either_side_fails(tmp_path, side):
  shorter = copy.deepcopy(BEFORE)
  del shorter["runs"]["uci/boston_housing/vi/seed_0"]
  before, after = (shorter, BEFORE) if side == "before" else (BEFORE, shorter)
  completed = _compare(tmp_path, before, after)
  assert completed.returncode == 1
  assert f"| uci/boston_housing/vi/seed_0 | (run) | - | - | missing {side} |" in completed.stdout


def test_a_failed_run_or_a_missing_metric_fails(tmp_path):
  failed = copy.deepcopy(BEFORE)
  failed["runs"]["uci/boston_housing/vi/seed_0"] = {"command": "x", "error": "exit status 1: boom"}
  completed = _compare(tmp_path, BEFORE, failed)
  assert completed.returncode == 1 and "missing after (exit status 1: boom)" in completed.stdout
  fewer = copy.deepcopy(BEFORE)
  del fewer["runs"]["uci/boston_housing/vi/seed_0"]["metrics"]["test_rmse"]
  completed = _compare(tmp_path, fewer, BEFORE)
  assert completed.returncode == 1 and "| test_rmse | - | 3.0254852771759033 | missing before |" \
      in completed.stdout


def test_changed_settings_are_listed_but_do_not_fail(tmp_path):
  after = copy.deepcopy(BEFORE)
  after["runs"]["uci/boston_housing/vi/seed_0"]["flags"] = {"vi_steps": 30000, "new_flag": 1}
  completed = _compare(tmp_path, BEFORE, after)
  assert completed.returncode == 0, completed.stderr
  assert "uci/boston_housing/vi/seed_0: --new_flag '(absent)' -> 1" in completed.stdout


@pytest.mark.parametrize("flags, message", [
    ([], "give exactly one of --output=FILE.json and --compare"),
    (["--compare=a.json"], "allowed: BEFORE.json,AFTER.json"),
    (["--output=x.json", "--only=uci,cifar"], "--only='uci,cifar' is not allowed"),
])
def test_bad_flags_are_one_line_usage_errors(tmp_path, flags, message):
  completed = subprocess.run([sys.executable, "-m", "benchmarks.numerics_fingerprint", *flags],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": REPO})
  assert completed.returncode == 2
  assert message in completed.stderr and len(completed.stderr.strip().splitlines()) == 1


def test_every_number_of_a_results_section_is_a_metric():
  section = {"test_mll": -2.5, "num_train": 405, "converged": True, "name": "x",
             "cumulative_regret": {"vi_ts": 3.0}, "per_seed": [1.0, 2.0],
             "stages": [{"elbo": -1.0}, {"elbo": -2.0}]}
  assert dict(fingerprint.numbers(section)) == {
      "test_mll": -2.5, "num_train": 405, "cumulative_regret/vi_ts": 3.0,
      "per_seed": [1.0, 2.0], "stages/0/elbo": -1.0, "stages/1/elbo": -2.0}


def test_regret_series_are_cumulative_per_line_and_seed(tmp_path):
  expected = np.array([[[0.0, 5.0, 0.0]], [[5.0, 0.0, 0.0]]], np.float32)   # [seeds, lines, steps]
  np.savez(tmp_path / "regret_vi_ts.npz", line_names=np.array(["vi_ts"]), seeds=np.array([3, 4]),
           expected_regret=expected, predicted_gap=expected - 1)
  series = fingerprint.regret_series(str(tmp_path))
  assert series["regret_record/vi_ts/seed_3/cumulative_expected_regret"] == [0.0, 5.0, 5.0]
  assert series["regret_record/vi_ts/seed_4/cumulative_expected_regret"] == [5.0, 5.0, 5.0]
  assert series["regret_record/vi_ts/seed_4/predicted_gap"] == [4.0, -1.0, -1.0]


FAKE_BINARY = """
import json, os, sys
output_dir = sys.argv[1].split("=", 1)[1]
if len(sys.argv) > 2:
  sys.exit("error: " + sys.argv[2])
with open(os.path.join(output_dir, "results.json"), "w") as handle:
  json.dump({"metrics": {"test_mll": -1.5, "peak_memory_mb": 321.0, "name": "x"},
             "flags": {"output_dir": output_dir, "threads": os.environ["TF_NUM_INTRAOP_THREADS"]}},
            handle)
"""


def test_a_run_keeps_its_numbers_apart_from_its_measurements_and_paths(tmp_path):
  """A stand-in binary (a module of --repo): the peak memory is a measurement, not a metric;
  recorded paths name the work directory by its placeholder; the thread settings reach it."""
  (tmp_path / "fake_binary.py").write_text(FAKE_BINARY)
  run = fingerprint_runs.Run("group/data/method/seed_0", "fake_binary",
                             ("--output_dir=$WORK_DIR/group/data/method/seed_0",))
  entry = fingerprint.run_one(run, str(tmp_path), str(tmp_path / "work"), str(tmp_path))
  assert entry["metrics"] == {"test_mll": -1.5}
  assert entry["measurements"] == {"peak_memory_mb": 321.0}
  assert entry["flags"] == {"output_dir": "$WORK_DIR/group/data/method/seed_0", "threads": "1"}
  assert entry["command"] == "python -m fake_binary --output_dir=$WORK_DIR/group/data/method/seed_0"
  failing = dataclasses.replace(run, key="group/data/failing/seed_0", arguments=(
      "--output_dir=$WORK_DIR/group/data/failing/seed_0", "the data are missing"))
  entry = fingerprint.run_one(failing, str(tmp_path), str(tmp_path / "work"), str(tmp_path))
  assert entry["error"] == "exit status 1: error: the data are missing"
  assert "metrics" not in entry


def test_every_group_runs_each_binary_with_one_thread_and_distinct_outputs():
  runs = [run for group in fingerprint_runs.runs_of(list(fingerprint_runs.GROUPS)).values()
          for run in group]
  assert len({run.key for run in runs}) == len(runs)
  assert len({run.output_dir for run in runs}) == len(runs)
  uci_methods = [run.key.split("/")[2] for run in runs if run.key.startswith("uci/")]
  assert uci_methods == list(fingerprint_runs.UCI_METHODS)
  for run in runs:
    assert f"--output_dir={run.output_dir}" in run.arguments
    if not run.binary.startswith("toy."):
      assert "--intra_op_threads=1" in run.arguments, run.key


def test_a_real_run_records_every_number_of_its_results(tmp_path):
  """The cheapest run of the list (toy.multimodal at smoke settings), end to end: its command,
  and every number of its results.json metrics. (Whether runs repeat bit for bit is the
  harness's self-check in results/ablations/redesign_equivalence/, too slow for a test.)"""
  run = next(run for run in fingerprint_runs.runs_of(["toy"])["toy"]
             if run.binary == "toy.multimodal")
  entry = fingerprint.run_one(run, REPO, str(tmp_path), str(tmp_path))   # the toy reads no data
  assert "error" not in entry, entry
  recorded = json.loads((tmp_path / run.key / "results.json").read_text())
  assert entry["metrics"] == dict(fingerprint.numbers(recorded["metrics"]))
  assert {"elbo", "elbo_aux", "modes_visited"} <= set(entry["metrics"])
  assert entry["command"].startswith("python -m toy.multimodal --output_dir=$WORK_DIR/toy/")
