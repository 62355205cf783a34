"""Table 3 from the committed ResNet-20 runs, in the paper's layout and beside its numbers.

  python -m resnet.table --results_dir=results/resnet --output_dir=results/resnet

A row per dataset and variant: CIFAR-10's rows carry the paper's variant
names (resnet_hybrid_batchnorm, ...) and its numbers in parentheses; other
datasets' rows ("fashion_mnist hybrid_bn") have ours only. The deep ensemble
has no variational layers: its runs (made under the hybrid variants) fill
the full variants' rows of the same batch-norm setting, as the paper's table
repeats them. Writes `table.md`, `table.csv` and `checks.md`: ELBO_aux >= ELBO
per run, refined VI against VI and against VI with equal compute, hybrid
against full, and ours in units of the paper's numbers where it has them.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from common import table_checks, tables

VARIANTS = ("hybrid_bn", "hybrid", "full_bn", "full")
PAPER_VARIANTS = {"hybrid_bn": "resnet_hybrid_batchnorm", "hybrid": "resnet_hybrid",
                  "full_bn": "resnet_batchnorm", "full": "resnet"}
COLUMNS = [("deep_ensemble", "test_mll", "mll"), ("deep_ensemble", "test_accuracy", "accuracy"),
           ("vi", "test_mll", "mll"), ("vi", "test_accuracy", "accuracy"), ("vi", "elbo", None),
           ("vi_equal_compute", "test_mll", None), ("vi_equal_compute", "test_accuracy", None),
           ("refined_vi", "test_mll", "mll"), ("refined_vi", "test_accuracy", "accuracy"),
           ("refined_vi", "elbo_aux", None)]
METRICS = ("test_mll", "test_accuracy", "elbo", "elbo_aux", "ece", "brier")
# The paper's Table 3 has one number per cell (no std): the mean columns.
PAPER_RENAMES = {"variant": "dataset", "mll": "paper_mll_mean", "accuracy": "paper_accuracy_mean"}
PAPER_CSV = "table3_resnet20.csv"
COMPARISONS = [("test_mll", "mll"), ("test_accuracy", "accuracy")]
HIGHER_IS_BETTER = ("test_mll", "test_accuracy")
timings = table_checks.timings


def variant_of(flags: dict) -> str:
  return f"{flags.get('variational', 'hybrid')}{'_bn' if flags.get('batchnorm') else ''}"


def row_name(dataset: str, variant: str) -> str:
  """CIFAR-10's rows take the paper's variant names; other datasets' rows name both."""
  return PAPER_VARIANTS[variant] if dataset == "cifar10" else f"{dataset} {variant}"


def row_names(datasets) -> list[str]:
  """Every row in table order: CIFAR-10 first, then the other datasets."""
  ordered = ["cifar10"] + sorted(set(datasets) - {"cifar10"})
  return [row_name(dataset, variant) for dataset in ordered for variant in VARIANTS]


def load_runs(results_dir: str) -> pd.DataFrame:
  """The runs, keyed by table row; ensemble runs also fill the full variants' rows."""
  def adjust(run, row):
    row["source_dataset"], row["variant"] = run["dataset"], variant_of(run["flags"])
    row["dataset"] = row_name(run["dataset"], row["variant"])

  runs = tables.load_runs(results_dir, "resnet", adjust)
  ensembles = runs[(runs["method"] == "deep_ensemble") & runs["variant"].str.startswith("hybrid")]
  copies = ensembles.assign(variant=ensembles["variant"].str.replace("hybrid", "full"))
  copies = copies.assign(dataset=[row_name(d, v) for d, v in zip(copies["source_dataset"],
                                                                  copies["variant"])])
  return pd.concat([runs, copies], ignore_index=True)


def summary(runs: pd.DataFrame, paper_dir: Optional[str] = None) -> pd.DataFrame:
  """Mean, std and seed count per row and method, beside the paper's Table 3."""
  return tables.summary(runs, METRICS, PAPER_CSV, PAPER_RENAMES, paper_dir)


def _mean(table: pd.DataFrame, dataset: str, method: str, metric: str):
  cells = table[(table["dataset"] == dataset) & (table["method"] == method)]
  return float(cells[f"{metric}_mean"].iloc[0]) if len(cells) else None


def resnet_checks(table: pd.DataFrame) -> str:
  """Refined VI against VI with equal compute, and hybrid against full, in mean MLL."""
  lines = []
  rows = sorted(set(table["dataset"]))
  compared = [(row, _mean(table, row, "refined_vi", "test_mll"),
               _mean(table, row, "vi_equal_compute", "test_mll")) for row in rows]
  compared = [(row, refined, equal) for row, refined, equal in compared
              if refined is not None and equal is not None]
  if compared:
    worse = [row for row, refined, equal in compared if refined < equal]
    lines.append(f"- Refined VI mean MLL >= VI (equal compute) mean MLL on "
                 f"{len(compared) - len(worse)} of {len(compared)} rows"
                 + (f" (not on: {', '.join(worse)})" if worse else ""))
  for method in ("vi", "refined_vi"):
    pairs = []
    for hybrid_row in rows:
      full_row = hybrid_row.replace("hybrid", "full").replace("resnet_full", "resnet")
      if "hybrid" not in hybrid_row or full_row not in rows:
        continue
      hybrid, full = (_mean(table, r, method, "test_mll") for r in (hybrid_row, full_row))
      if hybrid is not None and full is not None:
        pairs.append((hybrid_row, hybrid >= full))
    if pairs:
      worse = [row for row, holds in pairs if not holds]
      lines.append(f"- {tables.METHOD_TITLES[method]}: hybrid mean MLL >= full on "
                   f"{len(pairs) - len(worse)} of {len(pairs)} pairs"
                   + (f" (not on: {', '.join(worse)})" if worse else ""))
  return "\n".join(lines)


def write_tables(results_dir: str, output_dir: str) -> dict:
  runs = load_runs(results_dir)
  table = summary(runs)
  title = [
      "# ResNet-20 image classification (paper Table 3): ours, with the paper's value in "
      "parentheses", "",
      "Test MLL and accuracy of the M = 10 sample (or member) predictive; ELBO of the VI model "
      "and ELBO_aux", "of the refined samples on the training set. Mean ± std over seeds; ECE "
      "and Brier score are in table.csv."]
  check_text = table_checks.checks(runs, table, COMPARISONS, HIGHER_IS_BETTER)
  check_text = check_text.replace("# Checks\n\n", "# Checks\n\n" + resnet_checks(table) + "\n", 1)
  check_text += "\nThe paper's Table 3 gives no std: its numbers stand beside ours in table.md.\n"
  tables.write_tables(runs, table, output_dir, title, COLUMNS, check_text,
                      row_names(runs["source_dataset"]))
  return {"runs": runs, "table": table}


if __name__ == "__main__":
  tables.main(write_tables, "resnet")
