"""Figure 5 (cumulative regret against steps, mean +- std over seeds, one line per agent) and its
table, from the regret records of one or more bandit runs (an agent's runs over different seeds
are one line over all their seeds).

  python -m bandits.figure --run_dirs=results/bandits/mushroom --output_dir=results/bandits/mushroom
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from common.results import save_figure, write_text_atomically

RECORD_FILENAME = "regret_{agent}.npz"
FIGURE_FILENAME = "figure5_cumulative_regret.png"
TABLE_FILENAME = "figure5_cumulative_regret.md"


def _seed_count(seeds: Sequence[int]) -> str:
  return f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"


def draw_figure(records: Sequence, path: str, title: str = "Mushroom bandit") -> None:
  """Cumulative expected regret of every line of `records` (RegretRecord), mean +- std."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
  figure, axes = pyplot.subplots(figsize=(6.4, 4.2))
  same_seeds = len({tuple(record.seeds) for record in records}) == 1
  for record in records:
    cumulative = record.cumulative()
    steps = np.arange(1, cumulative.shape[-1] + 1)
    for index, name in enumerate(record.line_names):
      mean, std = cumulative[:, index].mean(axis=0), cumulative[:, index].std(axis=0)
      label = name if same_seeds else f"{name} ({_seed_count(record.seeds)})"
      line, = axes.plot(steps, mean, label=label)
      axes.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
  axes.set_xlabel("step")
  axes.set_ylabel("cumulative expected regret")
  over = _seed_count(records[0].seeds) if same_seeds else "each line's seeds"
  axes.set_title(f"{title} (mean ± std over {over})")
  axes.legend()
  axes.grid(alpha=0.3)
  save_figure(figure, path)
  pyplot.close(figure)


def regret_table(records: Sequence, report_interval: int) -> str:
  """Markdown: cumulative expected regret (mean ± std over seeds) of every line at every
  `report_interval` steps, and the final realised regret."""
  horizon = max(record.expected_regret.shape[-1] for record in records)
  from bandits.regret_record import reported_steps  # pylint: disable=import-outside-toplevel
  steps = reported_steps(horizon, report_interval)
  header = ["agent", "seeds"] + [f"{step:,}" for step in steps] + ["realised, final"]
  rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for record in records:
    expected, realised = record.cumulative(), record.cumulative(realised=True)
    for index, name in enumerate(record.line_names):
      cells = [name, ",".join(map(str, record.seeds))]
      for step in steps:
        if step <= expected.shape[-1]:
          values = expected[:, index, step - 1]
          cells.append(f"{values.mean():,.0f} ± {values.std():,.0f}")
        else:
          cells.append("")
      cells.append(f"{realised[:, index, -1].mean():,.0f}")
      rows.append("| " + " | ".join(cells) + " |")
  return "\n".join(rows) + "\n"


def write_figure_and_table(records: Sequence, output_dir: str, report_interval: int) -> None:
  draw_figure(records, os.path.join(output_dir, FIGURE_FILENAME))
  write_text_atomically(os.path.join(output_dir, TABLE_FILENAME),
                        regret_table(records, report_interval))


# Settings a run's identity holds (`Config.identity`) that runs of one agent may differ in.
_SEED_SETTINGS = ("seeds", "agents", "regret_report_interval")


def run_settings(run_dir: str) -> dict:
  """The settings that shape a run's results, as its results.json recorded them (a setting the
  record lacks counts as what runs made before it existed used)."""
  import json  # pylint: disable=import-outside-toplevel
  from bandits.config import BanditConfig  # pylint: disable=import-outside-toplevel
  from common.config import recorded_config  # pylint: disable=import-outside-toplevel
  from common.results import RESULTS_FILENAME  # pylint: disable=import-outside-toplevel
  path = os.path.join(run_dir, RESULTS_FILENAME)
  if not os.path.exists(path):
    raise ValueError(f"{path} is missing; allowed: finished runs of bandits.main")
  with open(path) as handle:
    recorded = json.load(handle)["flags"]
  return {name: value for name, value in recorded_config(BanditConfig, recorded).identity().items()
          if name not in _SEED_SETTINGS}


def records_in(run_dirs: Sequence[str]) -> list:
  """The regret records of the runs in `run_dirs`, one per agent in the order the agents are
  listed: an agent's runs over different seeds (for example refined_ts run seed by seed)
  become one record over all their seeds if they were made with the same settings; ValueError
  names the first setting that differs."""
  from bandits.config import AGENTS  # pylint: disable=import-outside-toplevel
  from bandits.regret_record import RegretRecord  # pylint: disable=import-outside-toplevel
  records = []
  for agent in AGENTS:
    runs = [run_dir for run_dir in run_dirs
            if os.path.exists(os.path.join(run_dir, RECORD_FILENAME.format(agent=agent)))]
    if len(runs) > 1:
      settings = [run_settings(run_dir) for run_dir in runs]
      for run_dir, other in zip(runs[1:], settings[1:]):
        differing = sorted(name for name in settings[0].keys() | other.keys()
                           if settings[0].get(name) != other.get(name))
        if differing:
          name = differing[0]
          raise ValueError(f"{agent} runs differ in --{name}: {settings[0].get(name)} in "
                           f"{runs[0]}, {other.get(name)} in {run_dir}; allowed: runs of one "
                           "agent over different seeds with the same settings")
    if runs:
      records.append(RegretRecord.over_seeds(
          [RegretRecord.load(os.path.join(run_dir, RECORD_FILENAME.format(agent=agent)))
           for run_dir in runs]))
  return records


def main(argv):
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  from runner.cli import UsageError  # pylint: disable=import-outside-toplevel
  try:
    records = records_in(flags.FLAGS.run_dirs)
  except ValueError as error:
    raise UsageError(str(error)) from error
  if not records:
    raise UsageError(f"no regret_<agent>.npz in --run_dirs={','.join(flags.FLAGS.run_dirs)}")
  os.makedirs(flags.FLAGS.output_dir, exist_ok=True)
  write_figure_and_table(records, flags.FLAGS.output_dir, flags.FLAGS.report_interval)
  print(regret_table(records, flags.FLAGS.report_interval), end="")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from runner import cli
  absl_flags.DEFINE_list("run_dirs", None, "Bandit run directories (output_dir of bandits.main).",
                         required=True)
  absl_flags.DEFINE_string("output_dir", None, "Where the figure and table go.", required=True)
  absl_flags.DEFINE_integer("report_interval", 1000, "Table columns every this many steps.")
  cli.run(main)
