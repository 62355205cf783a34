"""Table 2 from the committed LeNet-5 runs, in the paper's layout and beside the paper's numbers.

  python -m report.image_table --results_dir=results/image --output_dir=results/image

Writes `table.md` (mean ± std over seeds, ours above the paper's), `table.csv`
(every metric, one row per dataset and method, with ECE and Brier score) and
`checks.md`: ELBO_aux >= ELBO for every run, refined VI against VI in MLL and
accuracy, and our means in units of the paper's standard deviations.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from report import table_checks, tables
from report.paper_comparison import PaperTable

DATASETS = ("mnist", "fashion_mnist", "cifar10")
COLUMNS = [("deep_ensemble", "test_mll", "mll"), ("deep_ensemble", "test_accuracy", "accuracy"),
           ("mnf", "test_mll", "mll"), ("mnf", "test_accuracy", "accuracy"),
           ("vi", "test_mll", "mll"), ("vi", "test_accuracy", "accuracy"), ("vi", "elbo", "elbo"),
           ("vi_equal_compute", "test_mll", None), ("vi_equal_compute", "test_accuracy", None),
           ("refined_vi", "test_mll", "mll"), ("refined_vi", "test_accuracy", "accuracy"),
           ("refined_vi", "elbo_aux", "elbo")]
METRICS = ("test_mll", "test_accuracy", "elbo", "elbo_aux", "ece", "brier")
PAPER_RENAMES = {f"{stem}_{stat}": f"paper_{stem}_{stat}" for stem in ("mll", "accuracy", "elbo")
                 for stat in ("mean", "std")}
PAPER_CSV = "table2_lenet5.csv"
# (Our metric, the paper CSV's column stem) pairs compared in units of the paper's std.
COMPARISONS = [("test_mll", "mll"), ("test_accuracy", "accuracy"), ("elbo", "elbo"),
               ("elbo_aux", "elbo")]
HIGHER_IS_BETTER = ("test_mll", "test_accuracy")
timings = table_checks.timings
# The report's Table 2: every counted run under <results_dir>/image.
PAPER_TABLE = PaperTable(
    2, "LeNet-5 image classification", "image", "table2_lenet5.tex", "image/README.md",
    "Test MLL and accuracy of the predictive averaged over the refined samples (the ensemble's "
    "members for deep ensembles); the ELBOs on the training set. ECE and Brier score are in "
    "[image.csv](image.csv).")


def load_runs(results_dir: str) -> pd.DataFrame:
  return tables.load_runs(results_dir, "image")


def summary(runs: pd.DataFrame, paper_dir: Optional[str] = None) -> pd.DataFrame:
  """Mean, std and seed count per dataset and method, beside the paper's Table 2."""
  return tables.summary(runs, METRICS, PAPER_CSV, PAPER_RENAMES, paper_dir)


def write_tables(results_dir: str, output_dir: str, smoke: bool = False) -> dict:
  runs = load_runs(results_dir)
  table = summary(runs)
  title = [
      "# LeNet-5 image classification (paper Table 2): ours, with the paper's value in parentheses",
      "",
      ("Test MLL and accuracy of the M = 10 sample (or member) predictive; ELBO of the VI model "
       "and ELBO_aux"),
      ("of the refined samples on the training set, whole-dataset scale. Mean ± std over seeds; "
       "ECE and"),
      "Brier score are in table.csv."
  ]
  check_text = table_checks.checks(runs, table, COMPARISONS, HIGHER_IS_BETTER, smoke)
  tables.write_tables(runs, table, output_dir, title, COLUMNS, check_text, DATASETS, smoke)
  return {"runs": runs, "table": table}


if __name__ == "__main__":
  tables.main(write_tables, "image")
