"""Benchmark tables from committed runs, in the paper's layout and beside the paper's numbers.

Each benchmark's table module (`report.uci_table`, `report.image_table`, `report.resnet_table`)
says which results to load (and how to turn them into the paper's units), which columns the
paper's table has, and where its CSV of targets is; this module does the rest: mean ± std over
seeds, the Markdown table (ours above the paper's value, or cells a caller formats).
The checks and timings are in `report.table_checks`.
"""
from __future__ import annotations

import math
import os
from typing import Callable, Optional, Sequence

import pandas as pd

from methods import registry
from report import results_loader
from common.results import atomic_output

# Each method's title in tables, as its module declares it (`methods.registry`).
METHOD_TITLES = {name: registry.method(name).title for name in registry.names()}
# What a table of smoke runs says of itself (`--smoke`; `./run_all.sh --scale=smoke`).
SMOKE_NOTE = ("**Smoke runs** (`./run_all.sh --scale=smoke`, tiny settings): they show that the "
              "code runs, not the paper's claims; not set against the paper.")
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
  loaded = results_loader.load_runs(results_dir, benchmark)
  if not loaded:
    raise FileNotFoundError(f"no {benchmark} results.json under {results_dir}")
  return runs_frame(loaded, adjust)


def runs_frame(loaded: Sequence[results_loader.LoadedRun],
               adjust: Optional[Callable[[dict, dict], None]] = None) -> pd.DataFrame:
  """One row per loaded run (in the order given), as `load_runs` makes them."""
  rows = []
  for path, run in loaded:
    row = {"dataset": run["dataset"], "method": run["method"], "seed": run["seed"],
           "git_commit": run["git_commit"],
           "git_commit_at_start": run.get("git_commit_at_start"), "path": path}
    row.update(run["metrics"])
    row.update(run["timings"])
    if adjust is not None:
      adjust(run, row)
    rows.append(row)
  return pd.DataFrame(rows)


def summary(runs: pd.DataFrame, metrics: Sequence[str], paper_csv: str,
            paper_renames: dict[str, str], paper_dir: Optional[str] = None) -> pd.DataFrame:
  """Mean, std and seed count per dataset and method, beside the paper's columns.

  The paper's columns are renamed `paper_<stem>_*`; `paper_dir` as in results_loader.
  """
  metrics = [m for m in metrics if m in runs]
  grouped = runs.groupby(["dataset", "method"])
  table = grouped[metrics].agg(["mean", "std"])
  table.columns = [f"{metric}_{stat}" for metric, stat in table.columns]
  table["num_seeds"] = grouped.size()
  table = table.reset_index()
  paper = results_loader.load_paper_table(paper_csv, paper_dir).rename(columns=paper_renames)
  return table.merge(paper, on=["dataset", "method"], how="left")


def missing(value) -> bool:
  """Whether a table value is absent (None or NaN)."""
  return value is None or (isinstance(value, float) and math.isnan(value))


def cell(mean, std, digits: int) -> str:
  if missing(mean):
    return "–"
  return f"{mean:,.{digits}f}" + ("" if missing(std) else f" ± {std:,.{digits}f}")


def digits_of(metric: str) -> int:
  return 1 if metric.startswith("elbo") else 3


# Formats one cell of the paper layout: (the summary row of a dataset and method, our metric, the
# paper CSV's column stem or None) -> text.
CellFormat = Callable[[pd.Series, str, Optional[str]], str]


def ours_above_paper(row: pd.Series, metric: str, paper_stem: Optional[str]) -> str:
  """The table.md cell: our mean ± std, then the paper's in parentheses."""
  digits = digits_of(metric)
  ours = cell(row.get(f"{metric}_mean"), row.get(f"{metric}_std"), digits)
  paper = (cell(row.get(f"paper_{paper_stem}_mean"), row.get(f"paper_{paper_stem}_std"), digits)
           if paper_stem else "–")
  return f"{ours}<br>({paper})"


def layout_rows(table: pd.DataFrame, columns: Sequence[Column],
                datasets: Optional[Sequence[str]] = None,
                format_cell: CellFormat = ours_above_paper) -> tuple[list[str], list[list[str]]]:
  """The paper layout as a header and rows of text cells: per dataset, one cell per column, seeds.

  A dataset without runs is left out; a method without runs on a dataset is "not run". The seeds
  cell lists the distinct seed counts of the row's cells ("3/5" when they differ).
  """
  header = ["Dataset"] + [
      f"{METHOD_TITLES[m]} {METRIC_TITLES[metric]}" for m, metric, _ in columns
  ] + ["seeds"]
  indexed = table.set_index(["dataset", "method"])
  rows = []
  for dataset in datasets or sorted(table["dataset"].unique()):
    if dataset not in set(table["dataset"]):
      continue
    cells, seeds = [dataset], set()
    for method, metric, paper_stem in columns:
      if (dataset, method) not in indexed.index:
        cells.append("not run")
        continue
      row = indexed.loc[(dataset, method)]
      cells.append(format_cell(row, metric, paper_stem))
      seeds.add(int(row["num_seeds"]))
    rows.append(cells + ["/".join(str(s) for s in sorted(seeds))])
  return header, rows


def paper_layout(table: pd.DataFrame, columns: Sequence[Column],
                 datasets: Optional[Sequence[str]] = None,
                 format_cell: CellFormat = ours_above_paper) -> str:
  """Markdown: a row per dataset; per column ours, then (the paper's)."""
  header, rows = layout_rows(table, columns, datasets, format_cell)
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def write_text(path: str, text: str) -> None:
  with atomic_output(path) as temporary, open(temporary, "w") as handle:
    handle.write(text)


def write_tables(runs: pd.DataFrame, table: pd.DataFrame, output_dir: str,
                 title_lines: Sequence[str], columns: Sequence[Column], check_text: str,
                 datasets: Optional[Sequence[str]] = None, smoke: bool = False) -> None:
  """Writes table.csv, table.md and checks.md in `output_dir`.

  table.md holds the title (then SMOKE_NOTE for `smoke` runs), the paper layout, the run count
  and the commits.
  """
  if smoke:
    title_lines = [*title_lines, "", SMOKE_NOTE]
  commits = sorted(str(c) for c in runs["git_commit"].unique())
  with atomic_output(os.path.join(output_dir, "table.csv")) as path:
    table.to_csv(path, index=False)
  text = list(title_lines) + ["", paper_layout(table, columns, datasets), "",
                              f"Runs: {len(runs)}; code commits: {', '.join(commits)}.", ""]
  write_text(os.path.join(output_dir, "table.md"), "\n".join(text))
  write_text(os.path.join(output_dir, "checks.md"), check_text)


def main(write_tables_fn: Callable[..., dict], benchmark: str) -> None:
  """The `__main__` of a benchmark's table binary: `write_tables_fn(results_dir, output_dir,
  smoke)`.

  Its flags: --results_dir and --output_dir, both results/<benchmark> by default, and --smoke.
  """
  from absl import flags

  from runner import cli
  flags.DEFINE_string("results_dir", f"results/{benchmark}",
                      "Where the runs' results.json files are.")
  flags.DEFINE_string("output_dir", f"results/{benchmark}",
                      "Where table.md, table.csv and checks.md go.")
  flags.DEFINE_bool("smoke", False, "The runs are smoke runs (./run_all.sh --scale=smoke): say so, "
                    "and give no distance from the paper.")

  def run_main(argv):
    del argv
    write_tables_fn(flags.FLAGS.results_dir, flags.FLAGS.output_dir, flags.FLAGS.smoke)
  cli.run(run_main)
