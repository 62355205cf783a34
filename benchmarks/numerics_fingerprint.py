"""The suite's numerical fingerprint: a fixed list of small runs of every binary and method, whose
metrics a pure refactor must leave bit-identical (issue 52).

  python -m benchmarks.numerics_fingerprint --output=FILE.json [--work_dir=DIR] [--only=GROUP,...]
      [--repo=DIR]
  python -m benchmarks.numerics_fingerprint --compare=BEFORE.json,AFTER.json [--tolerance=0]

The first form runs the runs of each group one at a time, each a fresh `python -m <binary>`
started in --repo (default: the repository holding this module), so one tree's harness can
fingerprint another tree's code, into --work_dir (default: a new temporary directory; it must
not hold earlier runs, which the binaries would reuse instead of running), and writes FILE.json:
per run (keyed `<group>/<dataset>/<method>/seed_<s>`) its command and every number of its
results.json `metrics` (measurements such as the peak memory kept apart, not compared); for a
bandit run also each line's per-step cumulative expected regret and the predicted reward gap
each action was chosen from, per seed (its regret_<agent>.npz); then the commit, the machine,
the package versions, the date, each run's and group's wall and CPU seconds.
Every run gets one intra-op and one inter-op thread ($TF_NUM_INTRAOP_THREADS and
$TF_NUM_INTEROP_THREADS, and --intra_op_threads=1 where the binary has it), so its numbers do
not depend on the machine's load. Groups:
  uci           Boston, seed 0, every method of uci.main at its defaults (the paper's settings;
                svgd and fsvgd the f-POVI protocol's); the VI family shares one
                --vi_checkpoint_dir as uci/run_table.sh shares it (vogn its vogn/ subfolder);
  lenet5_smoke  image.main on MNIST, seed 0, with the flags `run_all.sh --scale=smoke` gives
                image/run_table.sh, for the table's methods and vogn and refined_vogn;
  resnet_tiny   resnet.main, every method, hybrid with batch norm, on 128 Fashion-MNIST
                images for one epoch of 4 steps (tests/test_resnet_main.py's tiny settings), and
                vi fully variational;
  bandit_tiny   bandits.main, every agent alone, seeds 0 and 1, 20 steps of 20 updates (and 20
                refinement steps), the learned noise scale; and refined_ts and vi_ts with a fixed
                noise scale;
  toy           toy.multimodal and toy.eight_schools at `run_all.sh --scale=smoke`'s flags.
Data come from $REFINED_VI_DATA_DIR (never downloaded).

The second form prints a Markdown table of every metric of both files, before, after and the
relative difference |a - b| / max(|a|, |b|) ("identical" when bit-equal; a per-step series is
one row, its largest difference), and exits 1 if a metric differs by more than --tolerance
(default 0: bit-identical), or a run or a metric is on one side only. Recorded settings that
differ are listed but do not fail.

The runs are listed in `benchmarks.fingerprint_runs`, the comparison is
`benchmarks.fingerprint_comparison`; this module runs them and is the command.
"""
from __future__ import annotations

import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Mapping, Sequence

from absl import flags

from benchmarks.fingerprint_comparison import comparison_table, load_fingerprint
from benchmarks.fingerprint_runs import (DATA_DIR_PLACEHOLDER, GROUPS, WORK_DIR_PLACEHOLDER, Run,
                                         runs_of)
from common.results import git_commit, library_versions, machine_description, write_json_atomically
from runner import cli

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One thread for every TensorFlow pool of every run: numbers independent of the machine's load.
THREAD_ENVIRONMENT = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
# Measurements among results.json metrics (the process's peak memory): recorded, never compared.
MEASUREMENTS = ("peak_memory_mb",)


def numbers(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
  """Every number in a results.json section, by '/'-joined path: (path, number) for scalars and
  (path, [numbers]) for lists of numbers (a series is one metric); strings and booleans are
  left out."""
  if isinstance(value, Mapping):
    for name, item in value.items():
      yield from numbers(item, f"{prefix}/{name}" if prefix else str(name))
  elif isinstance(value, (list, tuple)):
    if value and all(_is_number(item) for item in value):
      yield prefix, list(value)
    else:
      for index, item in enumerate(value):
        yield from numbers(item, f"{prefix}/{index}")
  elif _is_number(value):
    yield prefix, value


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def regret_series(output_dir: str) -> dict[str, list]:
  """Per line and seed of each regret_<agent>.npz in `output_dir`: the cumulative expected regret
  after every step and the predicted reward gap each action was chosen from."""
  import numpy as np
  series = {}
  for name in sorted(os.listdir(output_dir)):
    if not (name.startswith("regret_") and name.endswith(".npz")):
      continue
    with np.load(os.path.join(output_dir, name)) as record:
      cumulative = np.cumsum(record["expected_regret"].astype(np.float64), axis=-1)
      gaps = record["predicted_gap"] if "predicted_gap" in record.files else None
      for line_index, line in enumerate(record["line_names"]):
        for seed_index, seed in enumerate(record["seeds"]):
          prefix = f"regret_record/{line}/seed_{int(seed)}"
          series[f"{prefix}/cumulative_expected_regret"] = [
              float(v) for v in cumulative[seed_index, line_index]]
          if gaps is not None:
            series[f"{prefix}/predicted_gap"] = [float(v) for v in gaps[seed_index, line_index]]
  return series


def _anonymised(value: Any, work_dir: str, data_dir: str) -> Any:
  """`value` (a results.json section) with the work and data directories written as their
  placeholders, so that two fingerprints made in different places compare."""
  if isinstance(value, str):
    return value.replace(work_dir, WORK_DIR_PLACEHOLDER).replace(data_dir, DATA_DIR_PLACEHOLDER)
  if isinstance(value, Mapping):
    return {name: _anonymised(item, work_dir, data_dir) for name, item in value.items()}
  if isinstance(value, list):
    return [_anonymised(item, work_dir, data_dir) for item in value]
  return value


def _children_cpu_seconds() -> float:
  """CPU seconds (user and system) of this process's finished child processes so far."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def run_one(run: Run, repo: str, work_dir: str, data_dir: str) -> dict:
  """Runs `run` in `repo` and returns its fingerprint entry: command, metrics, recorded flags
  and seconds, or the error that stopped it."""
  output_dir = run.output_dir.replace(WORK_DIR_PLACEHOLDER, work_dir)
  os.makedirs(output_dir, exist_ok=True)
  environment = {**os.environ, **THREAD_ENVIRONMENT, "PYTHONPATH": repo,
                 "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                 "REFINED_VI_DATA_DIR": data_dir}
  started, cpu_started = time.perf_counter(), _children_cpu_seconds()
  with open(os.path.join(output_dir, "log.txt"), "w") as log:
    completed = subprocess.run(run.argv(work_dir, data_dir), cwd=repo, env=environment,
                               stdout=log, stderr=subprocess.STDOUT, check=False)
  entry: dict[str, Any] = {"command": run.command(), "binary": run.binary,
                           "seconds": time.perf_counter() - started,
                           "cpu_seconds": _children_cpu_seconds() - cpu_started}
  results_path = os.path.join(output_dir, "results.json")
  if completed.returncode != 0 or not os.path.exists(results_path):
    with open(os.path.join(output_dir, "log.txt")) as log:
      errors = [line.strip() for line in log if line.strip()] or ["(no output)"]
    entry["error"] = f"exit status {completed.returncode}: {errors[-1]}"
    return entry
  with open(results_path) as handle:
    results = json.load(handle)
  recorded = dict(numbers(results.get("metrics", {})))
  metrics = {name: value for name, value in recorded.items() if name not in MEASUREMENTS}
  if run.binary == "bandits.main":
    metrics.update(regret_series(output_dir))
  entry["metrics"] = metrics
  entry["measurements"] = {name: recorded[name] for name in MEASUREMENTS if name in recorded}
  entry["flags"] = _anonymised(results.get("flags", {}), work_dir, data_dir)
  return entry


def fingerprint(groups: Sequence[str], repo: str, work_dir: str, data_dir: str,
                report=print) -> dict:
  """Runs every run of `groups` in `repo`, one at a time, and returns the fingerprint."""
  runs, group_seconds, group_cpu_seconds = {}, {}, {}
  for group, group_runs in runs_of(groups).items():
    for run in group_runs:
      runs[run.key] = entry = run_one(run, repo, work_dir, data_dir)
      report(f"{run.key}: {entry.get('error', 'done')} ({entry['seconds']:.0f} s, CPU "
             f"{entry['cpu_seconds']:.0f} s)")
    group_seconds[group] = sum(runs[run.key]["seconds"] for run in group_runs)
    group_cpu_seconds[group] = sum(runs[run.key]["cpu_seconds"] for run in group_runs)
  return {"runs": runs, "groups": list(groups), "group_seconds": group_seconds,
          "group_cpu_seconds": group_cpu_seconds,
          "repo": repo, "git_commit": git_commit(repo), "machine": machine_description(),
          "thread_environment": THREAD_ENVIRONMENT, "versions": library_versions(),
          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _groups(value: str) -> list[str]:
  groups = [name for name in value.split(",") if name] if value else list(GROUPS)
  unknown = [name for name in groups if name not in GROUPS]
  cli.require(bool(groups) and not unknown and len(set(groups)) == len(groups),
              f"--only={value!r} is not allowed; allowed: distinct groups among "
              f"{', '.join(GROUPS)}")
  return groups


def main(argv):
  del argv
  options = flags.FLAGS
  cli.require(bool(options.output) != bool(options.compare),
              "give exactly one of --output=FILE.json and --compare=BEFORE.json,AFTER.json")
  if options.compare:
    paths = options.compare.split(",")
    cli.require(len(paths) == 2 and all(paths),
                f"--compare={options.compare!r}; allowed: BEFORE.json,AFTER.json")
    cli.require(options.tolerance >= 0, f"--tolerance={options.tolerance} must be >= 0")
    text, failing = comparison_table(load_fingerprint(paths[0]), load_fingerprint(paths[1]),
                                     options.tolerance)
    print(text)
    if failing:
      names = ", ".join(f"{row.run} {row.metric}" for row in failing[:5])
      raise RuntimeError(f"{len(failing)} row(s) differ beyond --tolerance="
                         f"{options.tolerance:g} or miss a side, e.g. {names}")
    return
  groups = _groups(options.only)
  repo = os.path.abspath(options.repo)
  cli.require(os.path.isdir(os.path.join(repo, "uci")),
              f"--repo={options.repo} holds no suite (no uci/); allowed: a checkout of it")
  data_dir = os.environ.get("REFINED_VI_DATA_DIR")
  cli.require(bool(data_dir), "$REFINED_VI_DATA_DIR is not set; allowed: the data directory")
  work_dir = os.path.abspath(options.work_dir or tempfile.mkdtemp(prefix="numerics_fingerprint_"))
  cli.require(not (os.path.isdir(work_dir) and os.listdir(work_dir)),
              f"--work_dir={work_dir} is not empty: the binaries would reuse its runs; allowed: "
              "a new or empty directory")
  print(f"work directory: {work_dir}", flush=True)
  payload = fingerprint(groups, repo, work_dir, os.path.abspath(data_dir),
                        report=lambda line: print(line, flush=True))
  payload["command"] = " ".join(["python -m benchmarks.numerics_fingerprint"] + sys.argv[1:])
  write_json_atomically(options.output, payload)
  failed = [key for key, entry in payload["runs"].items() if "error" in entry]
  print(", ".join(f"{group} {seconds:.0f} s (CPU {payload['group_cpu_seconds'][group]:.0f} s)"
                  for group, seconds in payload["group_seconds"].items()))
  if failed:
    raise RuntimeError(f"{len(failed)} run(s) failed (recorded in {options.output}): "
                       f"{', '.join(failed)}")


if __name__ == "__main__":
  flags.DEFINE_string("output", None, "Run the groups and write their fingerprint here.")
  flags.DEFINE_string("work_dir", None,
                      "New or empty directory for the runs' outputs (default: a new temporary "
                      "directory).")
  flags.DEFINE_string("only", None, f"Comma-separated groups to run, among {', '.join(GROUPS)} "
                      "(default: all).")
  flags.DEFINE_string("repo", REPOSITORY, "Checkout whose binaries run (default: this one).")
  flags.DEFINE_string("compare", None,
                      "BEFORE.json,AFTER.json: print every metric of both and exit 1 if any "
                      "differs beyond --tolerance or is on one side only.")
  flags.DEFINE_float("tolerance", 0.0, "Largest relative difference allowed by --compare (0: "
                     "bit-identical).")
  cli.run(main)
