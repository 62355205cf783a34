"""Related methods beside the VI family on one benchmark: per-metric tables and paired differences.

A benchmark's related table module (`report.uci_related_table`, `report.image_related_table`) loads
its runs (ours and those under results/related/<benchmark>) into one frame; this module writes the
comparison a researcher can cite: mean ± std over seeds per dataset and method, the compute each
method spent, and paired per-seed differences for the questions the comparison asks (does
refinement help VOGN as it helps VI; does VOGN's posterior beat VI's), then the commands that
remake its runs (`report.remake_commands`).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from report import tables
from report.remake_commands import commands_section

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
