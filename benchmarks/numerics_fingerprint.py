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
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Mapping, Optional, Sequence

from absl import flags

from common.results import git_commit, library_versions, machine_description, write_json_atomically
from runner import cli

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One thread for every TensorFlow pool of every run: numbers independent of the machine's load.
THREAD_ENVIRONMENT = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
WORK_DIR_PLACEHOLDER, DATA_DIR_PLACEHOLDER = "$WORK_DIR", "$REFINED_VI_DATA_DIR"
# Measurements among results.json metrics (the process's peak memory): recorded, never compared.
MEASUREMENTS = ("peak_memory_mb",)
UCI_METHODS = ("vi", "refined_vi", "vi_equal_compute", "vogn", "refined_vogn", "mnf",
               "deep_ensemble", "svgd", "fsvgd")
IMAGE_METHODS = ("vi", "refined_vi", "vi_equal_compute", "deep_ensemble", "mnf", "vogn",
                 "refined_vogn")
# run_all.sh --scale=smoke's flags for image/run_table.sh on MNIST.
LENET5_SMOKE_FLAGS = ("--num_train_examples=1024", "--num_test_examples=500", "--vi_steps=100",
                      "--num_samples=3", "--num_auxiliary=2", "--steps_per_auxiliary=10",
                      "--mnf_steps=50", "--ensemble_members=2", "--ensemble_steps=50",
                      "--batch_size=64")
RESNET_METHODS = ("vi", "refined_vi", "vi_equal_compute", "deep_ensemble")
# tests/test_resnet_main.py's TINY: 4 steps of 32 an epoch; refinement M = 2, K = 2, T = 2.
RESNET_TINY_FLAGS = ("--dataset=fashion_mnist", "--num_train_examples=128",
                     "--num_test_examples=64", "--batch_size=32", "--epochs=1",
                     "--decay_epochs=0.5", "--decay_factors=0.1", "--num_samples=2",
                     "--num_auxiliary=2", "--steps_per_auxiliary=2", "--ensemble_members=2")
BANDIT_AGENTS = ("refined_ts", "vi_ts", "eps_greedy", "svgd_ts", "fsvgd_ts")
BANDIT_FIXED_NOISE_AGENTS = ("refined_ts", "vi_ts")
BANDIT_TINY_FLAGS = ("--seeds=0,1", "--horizon=20", "--update_steps=20", "--refine_steps=20",
                     "--regret_report_interval=5")
# run_all.sh --scale=smoke's flags.
TOY_MULTIMODAL_FLAGS = ("--num_samples=300", "--vi_steps=500", "--refine_steps=100",
                        "--elbo_samples=3000")
TOY_EIGHT_SCHOOLS_FLAGS = ("--num_auxiliary=1,2,4", "--num_samples=300", "--initial_steps=500",
                           "--steps_per_auxiliary=100", "--nuts_chains=16", "--nuts_burnin=200",
                           "--nuts_draws=300")


@dataclasses.dataclass(frozen=True)
class Run:
  """One binary run: its key in the fingerprint, `python -m binary` and its flags (paths under
  the work and data directories written with WORK_DIR_PLACEHOLDER and DATA_DIR_PLACEHOLDER)."""
  key: str
  binary: str
  arguments: tuple[str, ...]

  @property
  def output_dir(self) -> str:
    return os.path.join(WORK_DIR_PLACEHOLDER, self.key)

  def command(self) -> str:
    return " ".join(["python", "-m", self.binary, *self.arguments])

  def argv(self, work_dir: str, data_dir: str) -> list[str]:
    return [sys.executable, "-m", self.binary,
            *(argument.replace(WORK_DIR_PLACEHOLDER, work_dir)
              .replace(DATA_DIR_PLACEHOLDER, data_dir) for argument in self.arguments)]


def _table_runs(group: str, binary: str, dataset_flag: str, dataset: str,
                methods: Sequence[str], shared: Sequence[str], variant: str = "") -> list[Run]:
  """One seed-0 run per method, sharing one VI checkpoint directory, as common/run_table.sh runs
  a table (its output under <group>/<dataset>[/<variant>]/<method>/seed_0)."""
  folder = "/".join(filter(None, (group, dataset, variant)))
  checkpoints = f"{WORK_DIR_PLACEHOLDER}/{folder}/vi_checkpoints/seed_0"
  runs = []
  for method in methods:
    key = f"{folder}/{method}/seed_0"
    runs.append(Run(key, binary, (dataset_flag, f"--method={method}", "--seed=0",
                                  f"--output_dir={WORK_DIR_PLACEHOLDER}/{key}",
                                  f"--vi_checkpoint_dir={checkpoints}", *shared)))
  return runs


def _uci_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}/uci", "--nodownload")
  return _table_runs("uci", "uci.main", "--dataset=boston_housing", "boston_housing",
                     UCI_METHODS, shared)


def _lenet5_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *LENET5_SMOKE_FLAGS)
  return _table_runs("lenet5_smoke", "image.main", "--dataset=mnist", "mnist", IMAGE_METHODS,
                     shared)


def _resnet_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *RESNET_TINY_FLAGS)
  hybrid = _table_runs("resnet_tiny", "resnet.main", "--variational=hybrid", "fashion_mnist",
                       RESNET_METHODS, ("--batchnorm", *shared), variant="hybrid_bn")
  full = _table_runs("resnet_tiny", "resnet.main", "--variational=full", "fashion_mnist",
                     ("vi",), ("--num_eval_samples=1", *shared), variant="full")
  return hybrid + full


def _bandit_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *BANDIT_TINY_FLAGS)
  runs = []
  for noise, agents in (("learned", BANDIT_AGENTS), ("1.0", BANDIT_FIXED_NOISE_AGENTS)):
    for agent in agents:
      key = f"bandit_tiny/mushroom/noise_{noise}/{agent}"
      runs.append(Run(key, "bandits.main", (f"--agents={agent}", f"--noise_scale={noise}",
                                            f"--output_dir={WORK_DIR_PLACEHOLDER}/{key}",
                                            *shared)))
  return runs


def _toy_runs() -> list[Run]:
  return [Run(f"toy/{name}/refined_vi/seed_0", f"toy.{name}",
              (f"--output_dir={WORK_DIR_PLACEHOLDER}/toy/{name}/refined_vi/seed_0", *settings))
          for name, settings in (("multimodal", TOY_MULTIMODAL_FLAGS),
                                 ("eight_schools", TOY_EIGHT_SCHOOLS_FLAGS))]


GROUPS = {"uci": _uci_runs, "lenet5_smoke": _lenet5_runs, "resnet_tiny": _resnet_runs,
          "bandit_tiny": _bandit_runs, "toy": _toy_runs}


def runs_of(groups: Sequence[str]) -> dict[str, list[Run]]:
  """The fixed runs of each of `groups`, in the order they run."""
  return {group: GROUPS[group]() for group in groups}


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


@dataclasses.dataclass
class Row:
  """One metric of one run in a comparison."""
  run: str
  metric: str
  before: Any
  after: Any
  difference: float          # relative; 0 for bit-equal, inf for a side that is missing
  note: str = ""


def relative_difference(before: Any, after: Any) -> float:
  """|a - b| / max(|a|, |b|), elementwise maximum for series; 0 for bit-equal values (NaN equals
  NaN), inf for series of other lengths or a NaN against a number."""
  if isinstance(before, list) or isinstance(after, list):
    if not (isinstance(before, list) and isinstance(after, list)) or len(before) != len(after):
      return math.inf
    return max((relative_difference(b, a) for b, a in zip(before, after)), default=0.0)
  if before == after or (math.isnan(before) and math.isnan(after)):
    return 0.0
  if math.isnan(before) or math.isnan(after) or math.isinf(before) or math.isinf(after):
    return math.inf
  return abs(before - after) / max(abs(before), abs(after))


def compare(before: Mapping, after: Mapping) -> tuple[list[Row], list[str]]:
  """Every metric of every run of two fingerprints, and the recorded settings that differ."""
  rows, setting_notes = [], []
  for key in list(before["runs"]) + [k for k in after["runs"] if k not in before["runs"]]:
    old, new = before["runs"].get(key), after["runs"].get(key)
    if old is None or new is None or "error" in old or "error" in new:
      side = ("before" if old is None else "after" if new is None else
              f"before ({old['error']})" if "error" in old else f"after ({new['error']})")
      rows.append(Row(key, "(run)", None, None, math.inf, f"missing {side}"))
      continue
    old_metrics, new_metrics = old["metrics"], new["metrics"]
    for metric in list(old_metrics) + [m for m in new_metrics if m not in old_metrics]:
      if metric not in old_metrics or metric not in new_metrics:
        side = "before" if metric not in old_metrics else "after"
        rows.append(Row(key, metric, old_metrics.get(metric), new_metrics.get(metric), math.inf,
                        f"missing {side}"))
        continue
      rows.append(Row(key, metric, old_metrics[metric], new_metrics[metric],
                      relative_difference(old_metrics[metric], new_metrics[metric])))
    old_flags, new_flags = old.get("flags", {}), new.get("flags", {})
    for name in list(old_flags) + [n for n in new_flags if n not in old_flags]:
      if old_flags.get(name, "(absent)") != new_flags.get(name, "(absent)"):
        setting_notes.append(f"{key}: --{name} {old_flags.get(name, '(absent)')!r} -> "
                             f"{new_flags.get(name, '(absent)')!r}")
  return rows, setting_notes


def _shown(value: Any) -> str:
  if value is None:
    return "-"
  if isinstance(value, list):
    return f"{len(value)} values, last {_shown(value[-1]) if value else '-'}"
  return repr(value)


def comparison_table(before: Mapping, after: Mapping, tolerance: float) -> tuple[str, list[Row]]:
  """The Markdown comparison and the rows beyond `tolerance` (every row missing a side)."""
  rows, setting_notes = compare(before, after)
  failing = [row for row in rows if row.difference > tolerance]
  identical = sum(row.difference == 0 for row in rows)
  lines = [f"Before: {before.get('git_commit')} ({before.get('date')}); after: "
           f"{after.get('git_commit')} ({after.get('date')})", "",
           f"{len(rows)} metrics of {len({row.run for row in rows})} runs: {identical} identical, "
           f"{len(failing)} beyond the tolerance {tolerance:g}", "",
           "| run | metric | before | after | relative difference |", "|---|---|---|---|---|"]
  for row in rows:
    difference = ("identical" if row.difference == 0 else row.note or f"{row.difference:.3g}")
    lines.append(f"| {row.run} | {row.metric} | {_shown(row.before)} | {_shown(row.after)} | "
                 f"{difference} |")
  if setting_notes:
    lines += ["", "Recorded settings that differ (not failing):", ""]
    lines += [f"- {note}" for note in setting_notes]
  return "\n".join(lines) + "\n", failing


def _load(path: str) -> dict:
  try:
    with open(path) as handle:
      payload = json.load(handle)
  except (OSError, ValueError) as error:
    raise RuntimeError(f"cannot read the fingerprint {path}: {error}") from None
  if not isinstance(payload, dict) or not isinstance(payload.get("runs"), dict):
    raise RuntimeError(f"{path} is not a fingerprint (no 'runs'); allowed: a file written by "
                       "--output")
  return payload


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
    text, failing = comparison_table(_load(paths[0]), _load(paths[1]), options.tolerance)
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
