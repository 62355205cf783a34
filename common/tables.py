"""Benchmark tables from committed runs, in the paper's layout and beside the paper's numbers.

Each benchmark's `table` module says which results to load (and how to turn
them into the paper's units), which columns the paper's table has, and where
its CSV of targets is; this module does the rest: mean ± std over seeds, the
Markdown table (ours above the paper's value), the checks every issue asks
for (ELBO_aux >= ELBO per run, refined VI against VI, our means in units of
the paper's std), and the timing summary.
"""
from __future__ import annotations

import math
import os
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from common import results_loader
from common.results import atomic_output

METHOD_TITLES = {
    "deep_ensemble": "Deep ensemble",
    "mnf": "MNF",
    "vi": "VI",
    "vi_equal_compute": "VI (equal compute)",
    "refined_vi": "Refined VI"
}
METRIC_TITLES = {
    "test_mll": "MLL",
    "test_accuracy": "Acc",
    "test_rmse": "RMSE",
    "elbo": "ELBO",
    "elbo_aux": "ELBO_aux",
    "ece": "ECE",
    "brier": "Brier"
}
# A column of the paper-layout table: (method, our metric, the paper CSV's column stem or None).
Column = tuple[str, str, Optional[str]]


def load_runs(results_dir: str, benchmark: str,
              adjust: Optional[Callable[[dict, dict], None]] = None) -> pd.DataFrame:
  """One row per counted run of `benchmark` (see results_loader): keys, metrics, timings, path.

  `adjust(run, row)` may rewrite a row in place (for example, change units); `row["path"]` names
  the run's results.json for its error messages.
  """
  rows = []
  for path, run in results_loader.load_runs(results_dir, benchmark):
    row = {"dataset": run["dataset"], "method": run["method"], "seed": run["seed"],
           "git_commit": run["git_commit"], "path": path}
    row.update(run["metrics"])
    row.update(run["timings"])
    if adjust is not None:
      adjust(run, row)
    rows.append(row)
  if not rows:
    raise FileNotFoundError(f"no {benchmark} results.json under {results_dir}")
  return pd.DataFrame(rows)


def summary(runs: pd.DataFrame, metrics: Sequence[str], paper_csv: str,
            paper_renames: dict[str, str]) -> pd.DataFrame:
  """Mean, std and seed count per dataset and method, beside the paper's columns.

  The paper's columns are renamed `paper_<stem>_*`.
  """
  metrics = [m for m in metrics if m in runs]
  grouped = runs.groupby(["dataset", "method"])
  table = grouped[metrics].agg(["mean", "std"])
  table.columns = [f"{metric}_{stat}" for metric, stat in table.columns]
  table["num_seeds"] = grouped.size()
  table = table.reset_index()
  paper = results_loader.load_paper_table(paper_csv).rename(columns=paper_renames)
  return table.merge(paper, on=["dataset", "method"], how="left")


def _missing(value) -> bool:
  return value is None or (isinstance(value, float) and math.isnan(value))


def cell(mean, std, digits: int) -> str:
  if _missing(mean):
    return "–"
  return f"{mean:,.{digits}f}" + ("" if _missing(std) else f" ± {std:,.{digits}f}")


def digits_of(metric: str) -> int:
  return 1 if metric.startswith("elbo") else 3


def paper_layout(table: pd.DataFrame, columns: Sequence[Column],
                 datasets: Optional[Sequence[str]] = None) -> str:
  """Markdown: a row per dataset; per column ours, then (the paper's)."""
  header = ["Dataset"] + [
      f"{METHOD_TITLES[m]} {METRIC_TITLES[metric]}" for m, metric, _ in columns
  ] + ["seeds"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  indexed = table.set_index(["dataset", "method"])
  for dataset in datasets or sorted(table["dataset"].unique()):
    if dataset not in set(table["dataset"]):
      continue
    cells, seeds = [dataset], set()
    for method, metric, paper_stem in columns:
      if (dataset, method) not in indexed.index:
        cells.append("not run")
        continue
      row = indexed.loc[(dataset, method)]
      digits = digits_of(metric)
      ours = cell(row.get(f"{metric}_mean"), row.get(f"{metric}_std"), digits)
      paper = (cell(row.get(f"paper_{paper_stem}_mean"), row.get(f"paper_{paper_stem}_std"), digits)
               if paper_stem else "–")
      cells.append(f"{ours}<br>({paper})")
      seeds.add(int(row["num_seeds"]))
    cells.append("/".join(str(s) for s in sorted(seeds)))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def checks(runs: pd.DataFrame, table: pd.DataFrame, comparisons: Sequence[tuple[str, str]],
           higher_is_better: Sequence[str] = ("test_mll",)) -> str:
  """The checks: ELBO_aux >= ELBO per run, refined VI against VI, ours against the paper.

  Refined VI is set against VI per metric, ours against the paper in its stds.
  `comparisons` lists (our metric, paper stem) pairs to put in paper-std units.
  """
  lines = ["# Checks", ""]
  refined = runs[runs["method"] == "refined_vi"]
  if len(refined) and "elbo_aux" in refined:
    holds = refined["elbo_aux"] >= refined["elbo"]
    lines.append(
        f"- ELBO_aux >= ELBO (same run's VI model): {int(holds.sum())} of {len(refined)} "
        "dataset-seed runs."
    )
    for _, row in refined[~holds].iterrows():
      lines.append(
          f"  - fails: {row['dataset']} seed {row['seed']}: "
          f"{row['elbo_aux']:.1f} < {row['elbo']:.1f}"
      )
    gains = (refined["elbo_aux"] - refined["elbo"]).groupby(refined["dataset"]).mean()
    lines.append("- Mean ELBO_aux - ELBO per dataset: " +
                 ", ".join(f"{d} {g:+.1f}" for d, g in gains.items()))
  indexed = table.set_index(["dataset", "method"])
  datasets = sorted(table["dataset"].unique())
  compared = [
      d for d in datasets if (d, "refined_vi") in indexed.index and (d, "vi") in indexed.index
  ]
  for metric in higher_is_better:
    if f"{metric}_mean" not in table:
      continue
    better = [
        d for d in compared
        if indexed.loc[(d, "refined_vi"), f"{metric}_mean"] >= indexed.loc[(d, "vi"),
                                                                           f"{metric}_mean"]
    ]
    worse = sorted(set(compared) - set(better))
    lines.append(
        f"- Refined VI mean {METRIC_TITLES[metric]} >= VI mean {METRIC_TITLES[metric]} "
        f"on {len(better)} of "
        f"{len(compared)} datasets" + (f" (not on: {', '.join(worse)})" if worse else ""))
  best = []
  for dataset in datasets:
    candidates = table[(table["dataset"] == dataset)].set_index("method")["test_mll_mean"]
    best.append(f"{dataset}: {candidates.idxmax()}")
  lines.append("- Best mean MLL per dataset: " + "; ".join(best))
  lines += [
      "", "## Our mean against the paper's mean, in units of the paper's std", "",
      "| dataset | method | metric | ours | paper | (ours - paper) / paper std |",
      "|---|---|---|---|---|---|"
  ]
  for _, row in table.iterrows():
    for metric, stem in comparisons:
      if (row["method"] == "refined_vi") != (metric == "elbo_aux") and metric.startswith("elbo"):
        continue
      ours, paper, std = row.get(f"{metric}_mean"), row.get(f"paper_{stem}_mean"), row.get(
          f"paper_{stem}_std")
      if any(_missing(v) for v in (ours, paper, std)):
        continue
      if std == 0:
        lines.append(
            f"| {row['dataset']} | {row['method']} | {metric} | {ours:,.3f} | {paper:,.3f} | "
            f"paper std 0 (difference {ours - paper:+.3f}) |")
        continue
      z = (ours - paper) / std
      flag = "" if abs(z) <= 2 else " **outside 2 std**"
      lines.append(
          f"| {row['dataset']} | {row['method']} | {metric} | {ours:,.3f} | {paper:,.3f} | "
          f"{z:+.1f}{flag} |"
      )
  return "\n".join(lines) + "\n"


def timings(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
  """Per dataset the mean wall time of each method's parts and the refine/train ratio.

  Also the total machine time over all runs.
  """
  frame = runs.copy()
  per_dataset = frame.pivot_table(index="dataset", columns="method", values="train_seconds",
                                  aggfunc="mean")
  per_dataset.columns = [f"{c}_train_seconds" for c in per_dataset.columns]
  refined = frame[frame["method"] == "refined_vi"]
  if len(refined):
    ratio = refined["refine_seconds"] / refined["train_seconds"]
    per_dataset["refine_seconds"] = refined.groupby("dataset")["refine_seconds"].mean()
    per_dataset["refine_to_vi_train_ratio"] = ratio.groupby(refined["dataset"]).mean()
  extra = frame[frame["method"] == "vi_equal_compute"]
  if len(extra) and "extra_train_seconds" in extra:
    per_dataset["equal_compute_extra_seconds"] = extra.groupby(
        "dataset")["extra_train_seconds"].mean()
  # Machine time: each run's own wall time; VI training is shared by three runs, counted once (in
  # the vi run).
  totals = {
      "total_machine_seconds":
          float(frame["total_seconds"].sum()),
      "num_runs":
          int(len(frame)),
      "mean_refine_to_vi_train_ratio":
          float(np.mean(refined["refine_seconds"] /
                        refined["train_seconds"])) if len(refined) else float("nan")
  }
  return per_dataset.reset_index(), totals


def write_text(path: str, text: str) -> None:
  with atomic_output(path) as temporary, open(temporary, "w") as handle:
    handle.write(text)


def write_tables(runs: pd.DataFrame, table: pd.DataFrame, output_dir: str,
                 title_lines: Sequence[str], columns: Sequence[Column], check_text: str,
                 datasets: Optional[Sequence[str]] = None) -> None:
  """Writes table.csv, table.md and checks.md in `output_dir`.

  table.md holds the title, the paper layout, the run count and the commits.
  """
  commits = sorted(str(c) for c in runs["git_commit"].unique())
  with atomic_output(os.path.join(output_dir, "table.csv")) as path:
    table.to_csv(path, index=False)
  text = list(title_lines) + ["", paper_layout(table, columns, datasets), "",
                              f"Runs: {len(runs)}; code commits: {', '.join(commits)}.", ""]
  write_text(os.path.join(output_dir, "table.md"), "\n".join(text))
  write_text(os.path.join(output_dir, "checks.md"), check_text)


def main(write_tables_fn: Callable[[str, str], dict], benchmark: str) -> None:
  """The `__main__` of a benchmark's table binary.

  Its flags: --results_dir and --output_dir, both results/<benchmark> by default.
  """
  from absl import flags

  from common import cli
  flags.DEFINE_string("results_dir", f"results/{benchmark}",
                      "Where the runs' results.json files are.")
  flags.DEFINE_string("output_dir", f"results/{benchmark}",
                      "Where table.md, table.csv and checks.md go.")

  def run_main(argv):
    del argv
    write_tables_fn(flags.FLAGS.results_dir, flags.FLAGS.output_dir)
  cli.run(run_main)
