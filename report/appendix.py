"""The report's appendix: every metric of every counted results.json, per benchmark.

`appendix(results_dir, output_dir)` returns the Markdown of `appendix.md` (mean and sample
standard deviation over the seeds of each experiment, with the paper's mean and standard
deviation beside them where the paper has the number) and one CSV table per benchmark;
`report.main` writes them beside REPORT.md. The toy and benchmark experiments, whose metrics
the paper's tables do not hold, are summarised only here and in the figure captions.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

import numpy as np
import pandas as pd

from report.results_loader import load_paper_table, load_runs

PAPER_TABLES = {"uci": "table1_uci.csv", "image": "table2_lenet5.csv"}
# Our metric -> the paper's column stem. The paper's ELBO column holds ELBO_aux
# for refined VI, so `bound` (elbo_aux where present, else elbo) maps to it.
PAPER_COLUMNS = {"test_mll": "mll", "test_accuracy": "accuracy", "bound": "elbo"}
# UCI runs record ELBOs for standardised targets, the paper's Table 1 for original units:
# `python -m report.uci_table` converts them with each run's target_std and compares ELBOs there.
PAPER_COLUMNS_BY_BENCHMARK = {"uci": {"test_mll": "mll"}}
BENCHMARK_TABLES = {"uci": "uci/table.md", "image": "image/table.md"}
KEYS = ["benchmark", "dataset", "method"]
# An experiment is a run's folder without its seed part: runs of one benchmark, dataset and method
# made with other settings (ResNet-20's batch-norm variants, the 10,000-image proxy and the whole
# training set; the bandit with a learned or a fixed noise scale) are kept apart.
GROUP_KEYS = KEYS + ["experiment"]


def experiment_of(run_folder: str, payload: Mapping) -> str:
  """`run_folder` without a last part naming the run's one seed (`seed_<seed>` or `<seed>`); the
  seed is the results' `seed`, or the one of `flags.seeds` (the bandit's)."""
  seed = payload.get("seed")
  seeds = (payload.get("flags") or {}).get("seeds")
  if seed is None and isinstance(seeds, list) and len(seeds) == 1:
    seed = seeds[0]
  parent, last = os.path.split(os.path.normpath(run_folder))
  if seed is not None and last in (f"seed_{seed}", str(seed)):
    return parent or os.curdir
  return os.path.normpath(run_folder)


def load_results(results_dir: str) -> pd.DataFrame:
  """One row per counted results.json (see results_loader): keys, scalar metrics, timings, path.

  A metric that is an object of scalars (for example elbo_aux_by_k: {"1": ..., "2": ...}) becomes
  one column per key, `elbo_aux_by_k[1]`.
  """
  rows = []
  for path, payload in load_runs(results_dir):
    row = {key: payload.get(key) for key in KEYS + ["seed", "git_commit"]}
    row["path"] = os.path.relpath(path, results_dir)
    row["experiment"] = experiment_of(os.path.dirname(row["path"]), payload)
    for section in ("metrics", "timings"):
      for name, value in payload.get(section, {}).items():
        if _is_number(value):
          row[name] = float(value)
        elif isinstance(value, dict):
          row.update({
              f"{name}[{key}]": float(item) for key, item in value.items() if _is_number(item)
          })
    rows.append(row)
  frame = pd.DataFrame(rows)
  if len(frame) and "elbo" in frame:
    frame["bound"] = frame["elbo_aux"].fillna(
        frame["elbo"]) if "elbo_aux" in frame else frame["elbo"]
  return frame


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def summarise(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
  """Mean, sample standard deviation and run count of `metrics` per experiment (benchmark,
  dataset, method and the runs' folder without its seed part)."""
  metrics = [m for m in metrics if m in frame]
  grouped = frame.groupby(GROUP_KEYS, dropna=False)
  table = grouped[metrics].agg(["mean", "std"])
  table.columns = [f"{metric}_{stat}" for metric, stat in table.columns]
  table["runs"] = grouped.size()
  return table.reset_index()


def beside_paper(table: pd.DataFrame, paper: pd.DataFrame, columns: Mapping[str,
                                                                            str]) -> pd.DataFrame:
  """Adds paper_<stem>_mean / _std columns for every metric the paper reports."""
  renamed = {}
  for ours, stem in columns.items():
    for stat in ("mean", "std"):
      if f"{stem}_{stat}" in paper and f"{ours}_{stat}" in table:
        renamed[f"{stem}_{stat}"] = f"paper_{stem}_{stat}"
  paper_part = paper[["dataset", "method"] + list(renamed)].rename(columns=renamed)
  return table.merge(paper_part, on=["dataset", "method"], how="left")


def to_markdown(frame: pd.DataFrame, digits: int = 3) -> str:
  """A GitHub Markdown table (no extra dependency)."""
  def cell(value):
    if isinstance(value, (float, np.floating)):
      return "" if np.isnan(value) else f"{value:.{digits}f}"
    return str(value)
  lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
  lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
  return "\n".join(lines)


def _transpose(table: pd.DataFrame) -> pd.DataFrame:
  """A one-row summary as metric | value rows.

  An experiment with many metrics reads better down than across.
  """
  if len(table) != 1:
    return table
  row = table.iloc[0].drop(["benchmark", "dataset", "experiment"])
  if row["runs"] == 1:   # one run: its values, not means
    row = row.rename(lambda name: name[:-len("_mean")] if name.endswith("_mean") else name)
  return pd.DataFrame({"metric": list(row.index), "value": list(row.values)})


def appendix(results_dir: str, output_dir: str,
             paper_dir: Optional[str] = None) -> tuple[str, dict[str, pd.DataFrame]]:
  """(appendix.md's text, {benchmark: its CSV table}); links are relative to `output_dir`."""
  frame = load_results(results_dir)
  sections = [
      "# Appendix: every metric\n",
      f"Aggregated from {len(frame)} results.json files under `{results_dir}`: mean and sample "
      "standard deviation over the runs (`runs`) of each experiment (a run's folder without its "
      "seed part), the paper's values as `paper_*` where it has them. "
      "The same numbers are in the per-benchmark CSVs beside this file. "
      "[REPORT.md](REPORT.md) lays out the paper's tables.\n"
  ]
  csvs = {}
  not_metrics = GROUP_KEYS + ["seed", "git_commit", "path"]
  metric_names = [c for c in frame.columns if c not in not_metrics]
  for benchmark, part in frame.groupby("benchmark"):
    table = summarise(part, metric_names).dropna(axis=1, how="all")
    if benchmark not in PAPER_TABLES and part["dataset"].nunique() > 1:
      for dataset, experiment in part.groupby("dataset"):   # unrelated experiments: a section each
        sections.append(f"## {benchmark}: {dataset}\n")
        experiment_table = summarise(experiment, metric_names).dropna(axis=1, how="all")
        sections.append(f"{to_markdown(_transpose(experiment_table))}\n")
      csvs[benchmark] = table
      continue
    if benchmark in PAPER_TABLES:
      columns = PAPER_COLUMNS_BY_BENCHMARK.get(benchmark, PAPER_COLUMNS)
      table = beside_paper(table, load_paper_table(PAPER_TABLES[benchmark], paper_dir), columns)
    csvs[benchmark] = table
    sections.append(f"## {benchmark}\n")
    paper_layout = os.path.join(results_dir, BENCHMARK_TABLES.get(benchmark, ""))
    if benchmark in BENCHMARK_TABLES and os.path.exists(paper_layout):
      sections.append(f"In the paper's layout: [{BENCHMARK_TABLES[benchmark]}]"
                      f"({os.path.relpath(paper_layout, output_dir)}).\n")
    sections.append(f"{to_markdown(table)}\n")
  return "\n".join(sections), csvs
