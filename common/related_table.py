"""Related methods beside the VI family on one benchmark: per-metric tables and paired differences.

A benchmark's `related_table` module loads its runs (ours and those under
results/related/<benchmark>) into one frame; this module writes the comparison
a researcher can cite: mean ± std over seeds per dataset and method, the
compute each method spent, and paired per-seed differences for the questions
the comparison asks (does refinement help VOGN as it helps VI; does VOGN's
posterior beat VI's).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from common import tables

METHOD_TITLES = dict(tables.METHOD_TITLES, vogn="VOGN", refined_vogn="Refined VOGN",
                     vogn_gauss_newton="VOGN (GN)",
                     refined_vogn_gauss_newton="Refined VOGN (GN)", svgd="SVGD", fsvgd="f-SVGD")
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
  """Markdown rows: one per dataset, 'mean ± std (seeds)' per method (`number_format`: a format
  spec such as ",.3f", or ".3g" for metrics whose scale differs by dataset)."""
  present = [m for m in methods if m in set(runs.method)]
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


def paired_differences(runs: pd.DataFrame, metric: str, higher_is_better: bool = True
                       ) -> list[str]:
  """Per pair and dataset: mean ± standard error of (method - baseline) over shared seeds."""
  lines = ["| method − baseline | dataset | seeds | mean difference ± s.e. | better in |",
           "|---|---|---|---|---|"]
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
      lines.append(f"| {METHOD_TITLES.get(better, better)} − "
                   f"{METHOD_TITLES.get(baseline, baseline)} | {dataset} | {len(seeds)} | "
                   f"{tables.cell(differences.mean(), error, 3)} | "
                   f"{int(np.sum(differences > 0))}/{len(seeds)} |")
  return lines


def provenance(runs: pd.DataFrame, commands: str) -> str:
  """The title's last line: how to regenerate the runs and the table, how many, from which code."""
  commits = ", ".join(sorted(str(c) for c in runs.git_commit.unique()))
  return f"Commands: {commands}. Runs: {len(runs)}; code commits: {commits}."


def comparison_text(runs: pd.DataFrame, methods: Sequence[str],
                    metrics: Sequence[tuple[str, str, str]], title: Sequence[str],
                    paired_metric: str) -> str:
  """The whole comparison: title lines, a table per (metric, heading, number format), compute,
  paired differences."""
  runs = runs.assign(compute_seconds=compute_seconds(runs))
  lines = list(title)
  for metric, heading, number_format in list(metrics) + [
      ("compute_seconds", "Training seconds", ",.0f")]:
    if metric in runs:
      lines += ["", f"## {heading} (mean ± std over seeds, seed count)", ""]
      lines += metric_table(runs, methods, metric, number_format)
  lines += ["", f"## Paired differences in {paired_metric} (positive: the first is better)", ""]
  lines += paired_differences(runs, paired_metric)
  return "\n".join(lines) + "\n"
