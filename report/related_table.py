"""Related methods beside the VI family on one benchmark: per-metric tables and paired differences.

A benchmark's related table module (`report.uci_related_table`, `report.image_related_table`) loads
its runs (ours and those under results/related/<benchmark>) into one frame; this module writes the
comparison a researcher can cite: mean ± std over seeds per dataset and method, the compute each
method spent, and paired per-seed differences for the questions the comparison asks (does
refinement help VOGN as it helps VI; does VOGN's posterior beat VI's).
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from report import tables
from common.config import recorded_config
from common.results import git_history_positions

# The registry's titles, and those of the rows that are a method at other settings.
METHOD_TITLES = dict(tables.METHOD_TITLES, vogn_gauss_newton="VOGN (GN)",
                     refined_vogn_gauss_newton="Refined VOGN (GN)")
# (better method, baseline) pairs compared seed by seed.
PAIRS = (("refined_vogn", "vogn"), ("refined_vi", "vi"), ("vogn", "vi"),
         ("refined_vogn", "refined_vi"), ("refined_vogn", "vi_equal_compute"),
         ("vogn_gauss_newton", "vogn"), ("refined_vogn_gauss_newton", "vogn_gauss_newton"),
         ("refined_vogn_gauss_newton", "refined_vi"), ("fsvgd", "svgd"), ("fsvgd", "refined_vi"),
         ("svgd", "refined_vi"))


def compute_seconds(runs: pd.DataFrame) -> pd.Series:
  """Seconds each run spent training: its (shared) base model, any extra steps, refinement."""
  total = runs["train_seconds"].astype(float)
  for column in ("extra_train_seconds", "refine_total_seconds"):
    if column in runs:
      total = total + runs[column].fillna(0.0).astype(float)
  return total


def _number(value: float, number_format: str) -> str:
  return "–" if tables.missing(value) else format(value, number_format)


def metric_table(runs: pd.DataFrame, methods: Sequence[str], metric: str,
                 number_format: str) -> list[str]:
  """Markdown rows: one per dataset, 'mean ± std (seeds)' per method that records `metric`
  (`number_format`: a format spec such as ",.3f", or ".3g" for metrics whose scale differs by
  dataset)."""
  recorded = set(runs.loc[runs[metric].notna(), "method"]) if metric in runs else set()
  present = [m for m in methods if m in recorded]
  lines = ["| dataset | " + " | ".join(METHOD_TITLES.get(m, m) for m in present) + " |",
           "|---" * (len(present) + 1) + "|"]
  for dataset, group in runs.groupby("dataset"):
    cells = []
    for method in present:
      values = group.loc[group.method == method, metric].dropna().astype(float)
      if values.empty:
        cells.append("–")
        continue
      std = values.std() if len(values) > 1 else math.nan
      spread = "" if tables.missing(std) else f" ± {_number(std, number_format)}"
      cells.append(f"{_number(values.mean(), number_format)}{spread} ({len(values)})")
    lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
  return lines


def _paired_rows(runs: pd.DataFrame, metric: str, higher_is_better: bool = True) -> list[dict]:
  """Per pair of PAIRS and dataset, over the seeds both ran: the mean of the paired (first −
  second) differences, its standard error (nan for one seed) and the count where the first is
  better."""
  rows = []
  indexed = runs.set_index(["dataset", "method", "seed"])[metric].sort_index()
  for better, baseline in PAIRS:
    for dataset in sorted(set(runs.dataset)):
      try:
        first, second = indexed.loc[(dataset, better)], indexed.loc[(dataset, baseline)]
      except KeyError:
        continue
      seeds = sorted(set(first.index) & set(second.index))
      if not seeds:
        continue
      differences = np.array([first[s] - second[s] for s in seeds], float)
      if not higher_is_better:
        differences = -differences
      error = differences.std(ddof=1) / math.sqrt(len(seeds)) if len(seeds) > 1 else math.nan
      rows.append(dict(pair=(better, baseline), dataset=dataset, seeds=len(seeds),
                       mean=differences.mean(), error=error,
                       wins=int(np.sum(differences > 0))))
  return rows


def _pair_title(pair: tuple[str, str]) -> str:
  return " − ".join(METHOD_TITLES.get(method, method) for method in pair)


def paired_differences(runs: pd.DataFrame, metric: str, higher_is_better: bool = True
                       ) -> list[str]:
  """Per pair and dataset: mean ± standard error of (method - baseline) over shared seeds."""
  lines = ["| method − baseline | dataset | seeds | mean difference ± s.e. | better in |",
           "|---|---|---|---|---|"]
  for row in _paired_rows(runs, metric, higher_is_better):
    lines.append(f"| {_pair_title(row['pair'])} | {row['dataset']} | {row['seeds']} | "
                 f"{tables.cell(row['mean'], row['error'], 3)} | "
                 f"{row['wins']}/{row['seeds']} |")
  return lines


# Fewest shared seeds for a paired difference to be called beyond its noise (`standings`).
MIN_STANDING_SEEDS = 3


def standings(runs: pd.DataFrame, metric: str, higher_is_better: bool = True) -> list[str]:
  """Markdown bullets, one per pair of PAIRS: the datasets where the first method's paired mean
  difference to the second is beyond two standard errors either way, those within them (level),
  each over at least MIN_STANDING_SEEDS shared seeds, those with fewer, and those whose mean is
  not finite (a diverged or unrecorded seed: no tie)."""
  by_pair: dict[tuple[str, str], list[dict]] = {}
  for row in _paired_rows(runs, metric, higher_is_better):
    by_pair.setdefault(row["pair"], []).append(row)
  lines = []
  for pair, rows in by_pair.items():
    finite = [row for row in rows if math.isfinite(row["mean"])]
    counted = [row for row in finite if row["seeds"] >= MIN_STANDING_SEEDS]
    better = [row for row in counted if row["mean"] > 2 * row["error"]]
    worse = [row for row in counted if row["mean"] < -2 * row["error"]]
    level = [row["dataset"] for row in counted if row not in better and row not in worse]
    parts = [f"{label} on " + ", ".join(f"{row['dataset']} ({row['mean']:+.3f})" for row in found)
             for label, found in (("better", better), ("worse", worse)) if found]
    if level:
      parts.append("level on " + ", ".join(level))
    few = [f"{row['dataset']} ({row['seeds']})" for row in finite if row not in counted]
    if few:
      parts.append(f"fewer than {MIN_STANDING_SEEDS} seeds on " + ", ".join(few))
    not_finite = [row["dataset"] for row in rows if row not in finite]
    if not_finite:
      parts.append("not finite on " + ", ".join(not_finite))
    lines.append(f"- **{_pair_title(pair)}**: " + "; ".join(parts) + ".")
  return lines


def provenance(runs: pd.DataFrame) -> str:
  """The title's last line: how many runs, from which code, and where their commands are."""
  commits = ", ".join(sorted(str(c) for c in runs.git_commit.unique()))
  return (f"Runs: {len(runs)}; code commits: {commits}. The commands that made them are at the "
          "end.")


def commands_section(runs: pd.DataFrame, config_class: type, table_command: str) -> list[str]:
  """Markdown lines ending a table: the commands that remake its runs
  (`reproduction_commands`), then the one that writes the table."""
  history = git_history_positions()
  commands = reproduction_commands(runs, config_class, history)
  note = (" (`--noise_chunk_steps=0`: the per-step draws of runs made before the compiled loop)"
          if any("--noise_chunk_steps=0" in command for command in commands) else "")
  unknown = sorted({commit[:7] for commit in map(_start_commit, runs.to_dict("records"))
                    if commit and commit not in history})
  unknown_note = (f" This repository does not hold {', '.join(unknown)}, where runs started (a "
                  "shallow clone?): a line all of whose runs started there comes last, in no "
                  "known order." if unknown else "")
  return ["", "## Commands", "",
          "Each line remakes its runs' settings, with the settings each run recorded where they "
          f"differ from today's defaults{note}. Its runs were made at the code it names, where "
          "the line (without the flags that code did not have yet) remakes them bit for bit; "
          "a later commit may draw other random numbers. Runs of one dataset and seed share its "
          "VI (or VOGN) checkpoint across run_table.sh lines: the first line run trains it, at "
          "its own code, so run them in the order given, that in which their code was written."
          f"{unknown_note} Then `{table_command}` writes this file.", "",
          *commands]


# Settings that name the run rather than shape it: the run_table line gives them.
_RUN_NAMING = ("dataset", "method", "seed", "vi_checkpoint_dir")
# <root>/<benchmark>/<dataset>/<method>/seed_<s>/results.json: a run of a run_table.sh layout.
_TABLE_LAYOUT = re.compile(r"^(?P<root>.+)/(?P<benchmark>[a-z_]+)/(?P<dataset>[^/]+)/"
                           r"(?P<method>[^/]+)/seed_(?P<seed>[0-9]+)/results\.json$")


def _flags_beyond_defaults(record: dict, config_class: type) -> tuple[str, str]:
  """The settings a run recorded that remake it bit for bit (`Config.remake_settings`) and differ
  from today's defaults for its method and dataset, as flags (a setting missing from the record
  counts as what runs did before it existed, `absent_values`; values as the config resolves
  them); and the names of those the record lacks, which the run's own code did not have (there
  they are what it did anyway)."""
  naming = {"method": record["method"], "dataset": record["dataset"]}
  flags = record.get("flags", {})
  defaults = config_class(**naming)
  recorded = recorded_config(config_class, flags, **naming)
  parts, unknown_then = [], []
  for name in recorded.remake_settings():
    value = getattr(recorded, name)
    if name in _RUN_NAMING or value == getattr(defaults, name):
      continue
    if isinstance(value, bool):
      part = f"--{'' if value else 'no'}{name}"
    elif isinstance(value, tuple):
      part = f"--{name}={','.join(str(v) for v in value)}"
    else:
      part = f"--{name}={value}"
    parts.append(part)
    if name not in flags:
      unknown_then.append(f"--{name}")
  return " ".join(parts), ", ".join(unknown_then)


def _code(commit: Optional[str]) -> str:
  """Where a run's code is: its short commit, marked if the tree had uncommitted changes."""
  if not commit:
    return "unknown code"
  return f"code `{commit[:7]}`" + (" with uncommitted changes" if commit.endswith("-dirty")
                                   else "")


def _start_commit(record: Mapping) -> str:
  """The commit a run started at (the one it ended at if it recorded none), without "-dirty";
  "" if it recorded neither."""
  for key in ("git_commit_at_start", "git_commit"):
    value = record.get(key)
    if isinstance(value, str) and value:
      return value.removesuffix("-dirty")
  return ""


def _history_place(record: Mapping, history: Mapping[str, int]) -> tuple[bool, int]:
  """Where the code a run started at stands in `history`: (False, position), or (True, 0) for a
  commit it does not hold, so that such runs sort last."""
  position = history.get(_start_commit(record))
  return (position is None, position or 0)


def _span(values: Sequence[int]) -> str:
  """Seeds as run_table.sh takes them: "0 1 2"."""
  return " ".join(str(v) for v in sorted(set(values)))


def reproduction_commands(runs: pd.DataFrame, config_class: type,
                          history: Optional[Mapping[str, int]] = None) -> list[str]:
  """Markdown lines: the command that remakes each group of `runs` (rows with a results.json
  `path`), read from the settings each run recorded, so the table says exactly how every number
  was made. Runs of a run_table.sh layout sharing root, datasets, seeds and settings make one
  run_table.sh line if they were also made at the same code commit, which the line names (a
  later commit may draw other random numbers); any other run gets its own
  `python -m <benchmark>.main` line after them. Each kind comes in the order its runs' code was
  written (the commit a run started at, placed by `history`, by default
  `git_history_positions`; commits it lacks last, by hash): run top to bottom, the table lines
  train a dataset's and seed's shared checkpoint at the code that trained it (a refinement
  added at later code must not train its VOGN first). Single runs share no checkpoint."""
  history = git_history_positions() if history is None else history
  seeds_of: dict[tuple, set[int]] = {}
  singles = []
  # Per line's code: (commit unknown, place in history) of the earliest-written run's start.
  times: dict[str, tuple[bool, int]] = {}
  for path in sorted(set(runs.path)):
    with open(path) as stream:
      record = json.load(stream)
    extra, unknown_then = _flags_beyond_defaults(record, config_class)
    code = _code(record.get("git_commit")) + (
        f", which had no {unknown_then}" if unknown_then else "")
    started = _history_place(record, history)
    times[code] = min(times.get(code, started), started)
    match = _TABLE_LAYOUT.match(path.replace(os.sep, "/"))
    if match is None or (match["benchmark"], match["dataset"], match["method"],
                         int(match["seed"])) != (record["benchmark"], record["dataset"],
                                                 record["method"], int(record["seed"])):
      singles.append((times[code], f"- `python -m {record['benchmark']}.main "
                      f"--dataset={record['dataset']} --method={record['method']} "
                      f"--seed={record['seed']} " + (f"{extra} " if extra else "")
                      + f"--output_dir={os.path.dirname(path)}` ({code})"))
      continue
    key = (match["root"], match["benchmark"], code, record["method"], extra, record["dataset"])
    seeds_of.setdefault(key, set()).add(int(record["seed"]))
  datasets_of: dict[tuple, list[str]] = {}
  for (root, benchmark, code, method, extra, dataset), seeds in seeds_of.items():
    datasets_of.setdefault((root, benchmark, code, method, extra, _span(seeds)),
                           []).append(dataset)
  merged: dict[tuple, list[str]] = {}
  for (root, benchmark, code, method, extra, seeds), datasets in datasets_of.items():
    key = (root, benchmark, code, " ".join(sorted(datasets)), seeds, extra)
    merged.setdefault(key, []).append(method)
  lines = []
  for (root, benchmark, code, datasets, seeds, extra), methods in sorted(merged.items()):
    lines.append((times[code], f"- `common/run_table.sh --benchmark={benchmark} "
                  f"--output_root={root} --datasets=\"{datasets}\" --seeds=\"{seeds}\" "
                  f"--methods=\"{' '.join(sorted(methods))}\""
                  + (f" -- {extra}" if extra else "") + f"` ({code})"))
  # Stable sorts: lines of one place keep the order above.
  return [line for _, line in sorted(lines, key=lambda pair: pair[0])
          + sorted(singles, key=lambda pair: pair[0])]


def comparison_text(runs: pd.DataFrame, methods: Sequence[str],
                    metrics: Sequence[tuple[str, str, str]], title: Sequence[str],
                    paired_metric: str, config_class: type, table_command: str) -> str:
  """The whole comparison: title lines, what the paired differences say (`standings`), a table
  per (metric, heading, number format) that some run records, compute, the paired differences,
  and the commands (`commands_section`)."""
  runs = runs.assign(compute_seconds=compute_seconds(runs))
  lines = list(title)
  glance = standings(runs, paired_metric)
  if glance:
    lines += ["", f"## At a glance: paired {paired_metric} differences beyond two standard "
              "errors", "", "Each first method against the second, per dataset over the seeds "
              "both ran (positive: the first is better; the table of paired differences below "
              "has them all).", "", *glance]
  for metric, heading, number_format in list(metrics) + [
      ("compute_seconds", "Training seconds", ",.0f")]:
    if metric in runs and runs[metric].notna().any():
      lines += ["", f"## {heading} (mean ± std over seeds, seed count)", ""]
      lines += metric_table(runs, methods, metric, number_format)
  lines += ["", f"## Paired differences in {paired_metric} (positive: the first is better)", ""]
  lines += paired_differences(runs, paired_metric)
  lines += commands_section(runs, config_class, table_command)
  return "\n".join(lines) + "\n"
