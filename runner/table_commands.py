"""A table's runs as self-contained shell commands, one line per job, for any scheduler.

  common/run_table.sh --benchmark=uci --datasets="..." --print_commands [its other flags]

runs `python -m runner.table_commands` with run_table.sh's flags and prints on stdout one command
per job of the table (datasets × methods × seeds) that is not yet made with these settings;
nothing runs. A job is the methods that start from one trained model (vi, refined_vi,
vi_equal_compute share a VI checkpoint; vogn and refined_vogn theirs; `methods.registry`): they run
in order inside one command, so the lines need no ordering among themselves and any scheduler
(GNU parallel, a Slurm array, `xargs -P`) may run them at once. Each command changes into this
repository, makes the run's folder and writes the binary's output to its log.txt, exactly as
run_table.sh's local pool does; with --jobs above 1 each is pinned to one thread, as the pool
pins its runs.

A run counts as made when its results.json was made with these settings, decided by
`runner.made` as the binary decides it (the file alone is not enough). A run whose results.json
was made with other settings is printed too (its binary will stop on it unless the flags after
-- include --replace_mismatched) and named on stderr. On stderr, as lines starting with "#":
per dataset how many runs are made and how many are to run, then the table's total.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from typing import Optional, Sequence

from common.config import UsageError
from common.results import CODE_REPOSITORY
from methods import registry
from runner.made import RunSettings, RunState

BENCHMARKS = ("uci", "image", "resnet")
# Variables a run reads from the environment that the printed commands carry (if set).
CARRIED_ENVIRONMENT = ("REFINED_VI_DATA_DIR",)
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


@dataclasses.dataclass(frozen=True)
class Run:
  """One cell of the table: its names, its output folder and its binary's flags."""
  group: str   # <dataset> or <dataset>/<variant>
  method: str
  seed: str
  output_dir: str
  flags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Table:
  """What run_table.sh was asked for."""
  benchmark: str
  datasets: tuple[str, ...]
  methods: tuple[str, ...]
  seeds: tuple[str, ...]
  output_root: str
  vi_checkpoint_root: str
  variant: str
  jobs: int
  extra_flags: tuple[str, ...]

  def runs_of_jobs(self) -> list[list[Run]]:
    """The table's jobs in run_table.sh's order (method group, seed, dataset), each its runs in
    the order they must run."""
    jobs = []
    for group_methods in registry.training_jobs(self.methods):
      for seed in self.seeds:
        for dataset in self.datasets:
          jobs.append([self._run(dataset, method, seed) for method in group_methods])
    return jobs

  def _run(self, dataset: str, method: str, seed: str) -> Run:
    group = f"{dataset}/{self.variant}" if self.variant else dataset
    output_dir = os.path.join(self.output_root, self.benchmark, group, method, f"seed_{seed}")
    checkpoint_dir = os.path.join(self.vi_checkpoint_root, self.benchmark, group,
                                  "vi_checkpoints", f"seed_{seed}")
    flags = (f"--dataset={dataset}", f"--method={method}", f"--seed={seed}",
             f"--output_dir={output_dir}", f"--vi_checkpoint_dir={checkpoint_dir}",
             *self.extra_flags)
    return Run(group, method, seed, output_dir, flags)

  def environment(self) -> dict[str, str]:
    """The variables each command sets: run_table.sh's log level, its one-thread pin with
    --jobs above 1, and the data directory if set."""
    environment = {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    if self.jobs > 1:
      environment.update(ONE_THREAD)
    environment.update({name: os.environ[name] for name in CARRIED_ENVIRONMENT
                        if os.environ.get(name)})
    return environment

  def command(self, runs: Sequence[Run]) -> str:
    """One shell line running `runs` in order from this repository, each logging into its
    folder's log.txt; it stops at the first failed run (the next would need its model)."""
    environment = " ".join(f"{name}={shlex.quote(value)}"
                           for name, value in self.environment().items())
    parts = [f"cd {shlex.quote(CODE_REPOSITORY)}"]
    for run in runs:
      log = shlex.quote(os.path.join(run.output_dir, "log.txt"))
      parts.append(f"mkdir -p {shlex.quote(run.output_dir)}")
      parts.append(f"env {environment} python -m {self.benchmark}.main "
                   + " ".join(shlex.quote(flag) for flag in run.flags) + f" >{log} 2>&1")
    return " && ".join(parts)


def _count(number: int, noun: str) -> str:
  return f"{number} {noun}{'' if number == 1 else 's'}"


def table_commands(table: Table) -> tuple[list[str], list[str]]:
  """(the commands of the jobs with a run not yet made, the "#" summary lines)."""
  settings = RunSettings(f"{table.benchmark}.main")
  commands: list[str] = []
  differing: dict[str, list[str]] = {}   # what differs -> the folders it differs in
  counts: dict[str, list[int]] = {}   # group -> [runs, made]
  for runs in table.runs_of_jobs():
    to_run = []
    for run in runs:
      state: RunState = settings.state(run.flags)
      count = counts.setdefault(run.group, [0, 0])
      count[0] += 1
      if state.made:
        count[1] += 1
        continue
      to_run.append(run)
      if state.differing:
        differing.setdefault(state.description, []).append(run.output_dir)
    if to_run:
      commands.append(table.command(to_run))
  total_runs = sum(runs for runs, _ in counts.values())
  total_made = sum(made for _, made in counts.values())
  lines = [f"# {table.benchmark} {group}: {_count(runs, 'run')}, {made} made with these settings, "
           f"{runs - made} to run" for group, (runs, made) in counts.items()]
  for description, folders in differing.items():
    lines.append(f"# {_count(len(folders), 'run')} of these hold a results.json made with other "
                 f"settings, {description}, e.g. {folders[0]}: their commands stop there unless "
                 "the flags after -- include --replace_mismatched")
  settings_text = " ".join(table.extra_flags) or "the binary's defaults"
  where = table.output_root + (f", variant {table.variant}" if table.variant else "")
  lines.append(f"# {table.benchmark} table ({where}): {_count(total_runs, 'run')}, "
               f"{total_made} made with these settings, {total_runs - total_made} to run in "
               f"{_count(len(commands), 'job')}; settings beyond dataset, method, seed and "
               f"folders: {settings_text}")
  return commands, lines


def _parse(argv: Sequence[str]) -> Table:
  extra: list[str] = []
  if "--" in argv:
    extra = list(argv[argv.index("--") + 1:])
    argv = argv[:argv.index("--")]
  parser = argparse.ArgumentParser(
      prog="python -m runner.table_commands",
      description="Prints one command per job of a table not yet made (see the module docstring;"
      " common/run_table.sh --print_commands calls this).")
  parser.add_argument("--benchmark", choices=BENCHMARKS, required=True)
  parser.add_argument("--datasets", required=True, help="space-separated")
  parser.add_argument("--methods", required=True, help="space-separated")
  parser.add_argument("--seeds", required=True, help="space-separated")
  parser.add_argument("--output_root", required=True)
  parser.add_argument("--vi_checkpoint_root", default="")
  parser.add_argument("--variant", default="")
  parser.add_argument("--jobs", type=int, default=1)
  arguments = parser.parse_args(argv)
  for name in ("datasets", "methods", "seeds"):
    if not getattr(arguments, name).split():
      raise UsageError(f"--{name} is empty")
  return Table(arguments.benchmark, tuple(arguments.datasets.split()),
               tuple(arguments.methods.split()), tuple(arguments.seeds.split()),
               arguments.output_root, arguments.vi_checkpoint_root or arguments.output_root,
               arguments.variant, arguments.jobs, tuple(extra))


def main(argv: Optional[Sequence[str]] = None) -> int:
  # As run_table.sh: relative folders are relative to this repository, where the commands run.
  os.chdir(CODE_REPOSITORY)
  try:
    table = _parse(sys.argv[1:] if argv is None else argv)
    commands, lines = table_commands(table)
  except (UsageError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  print("\n".join(lines), file=sys.stderr)
  sys.stderr.flush()
  for command in commands:
    print(command)
  return 0


if __name__ == "__main__":
  sys.exit(main())
