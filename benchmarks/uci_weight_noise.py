"""Refinement's two gradient estimators compared on the UCI table.

The comparison is run for run, from the same VI models.

  uci/run_table.sh --output_root=results/ablations/per_batch_weight_noise \
      --vi_checkpoint_root=results --methods=refined_vi -- --refine_weight_noise=per_batch
  python -m benchmarks.uci_weight_noise --baseline_dir=results/uci \
      --variant_dir=results/ablations/per_batch_weight_noise/uci \
      --output_dir=results/benchmarks/uci_weight_noise

Pairs every refined_vi run of the baseline table (per_example noise: local
reparameterisation, the paper's estimator) with the variant's run of the same
dataset and seed (per_batch: one weight draw per member and step), which
started from the same VI checkpoint. Per dataset: mean test MLL and ELBO_aux
of each, the mean paired difference with its standard error, and refinement
time as a fraction of VI training time. Timings come from each run's own
results.json, so they are only comparable when both tables ran on equally
loaded machines; `benchmarks/refine_speed.py` measures the ratio in one
process.
"""
from __future__ import annotations

import os

import pandas as pd
from absl import flags

from runner import cli
from common.results import atomic_output, write_results
from report import paired_runs
from report.appendix import to_markdown
from report.uci_table import load_runs

METRICS = ("test_mll", "elbo_aux", "refine_to_train")


def refined_runs(results_dir: str) -> pd.DataFrame:
  """refined_vi runs indexed by (dataset, seed), with refinement over VI training seconds."""
  runs = load_runs(results_dir)
  runs = runs[runs["method"] == "refined_vi"].copy()
  if runs.empty:
    raise ValueError(f"no refined_vi runs under {results_dir}")
  runs["refine_to_train"] = runs["refine_seconds"] / runs["train_seconds"]
  return runs.set_index(["dataset", "seed"])[list(METRICS)]


def compare(baseline: pd.DataFrame, variant: pd.DataFrame) -> pd.DataFrame:
  """Per dataset: both means, and the mean paired difference with its standard error.

  A paired difference is variant - baseline.
  """
  return paired_runs.paired_differences(
      baseline.reset_index(), variant.reset_index(), group_by=["dataset"], metrics=METRICS,
      labels=("per_example", "per_batch")).set_index("dataset")


def main(argv):
  del argv
  table = compare(refined_runs(flags.FLAGS.baseline_dir), refined_runs(flags.FLAGS.variant_dir))
  totals = {
      "datasets":
          len(table),
      "mll_better_or_equal_per_batch":
          int((table["test_mll_difference"] >= 0).sum()),
      "mll_worse_by_over_2se":
          int((table["test_mll_difference"] < -2 * table["test_mll_difference_se"]).sum()),
      "mean_mll_difference":
          float(table["test_mll_difference"].mean()),
      "mean_elbo_aux_difference":
          float(table["elbo_aux_difference"].mean()),
      "mean_refine_to_train_per_example":
          float(table["refine_to_train_per_example"].mean()),
      "mean_refine_to_train_per_batch":
          float(table["refine_to_train_per_batch"].mean()),
  }
  text = [
      "# Refinement with per_batch weight noise against per_example (the paper's), same VI models",
      "",
      ("Differences are per_batch minus per_example, paired by dataset and seed "
       "(mean ± standard error)."),
      "MLL in original units; ELBO_aux on the training set in original units.", "",
      to_markdown(table.reset_index(), digits=4), ""
  ]
  text += [f"- {name}: {value:.4g}" for name, value in totals.items()]
  with atomic_output(os.path.join(flags.FLAGS.output_dir,
                                  "comparison.md")) as path, open(path, "w") as handle:
    handle.write("\n".join(text) + "\n")
  write_results(
      flags.FLAGS.output_dir, benchmark="benchmarks", dataset="uci_weight_noise",
      method="refined_vi", seed=0, flags={
          "baseline_dir": flags.FLAGS.baseline_dir,
          "variant_dir": flags.FLAGS.variant_dir
      }, metrics=totals, timings={})
  print("\n".join(text))


if __name__ == "__main__":
  # Defined here, not at import, so that tests can import `compare` beside other binaries' flags.
  flags.DEFINE_string("baseline_dir", "results/uci", "The per_example table's runs (results/uci).")
  flags.DEFINE_string("variant_dir", "results/ablations/per_batch_weight_noise/uci",
                      "The per_batch table's runs.")
  flags.DEFINE_string("output_dir", "results/benchmarks/uci_weight_noise",
                      "Where comparison.md and results.json go.")
  cli.run(main)
