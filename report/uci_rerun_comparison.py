"""Two runs of the UCI table compared seed for seed: did a change to the core move any number?

  python -m report.uci_rerun_comparison --before_dir=OLD/uci --after_dir=NEW/uci \
      --output_dir=results/ablations/box_muller_normals [--methods=vi,refined_vi,vi_equal_compute]

For a change that alters the random streams but not the method (new normal
sampler, noise drawn ahead), every (dataset, method, seed) run of the two
tables shares its data split and initialisation and differs only in the
numbers drawn. Per dataset and method: both means, the mean paired difference
(after - before) with its standard error over seeds, and whether it exceeds
2 standard errors; then the table's conclusions checked on each side
(refined VI above VI and above VI with equal compute, refined VOGN above VOGN, in mean MLL;
ELBO_aux above ELBO in every refined run).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
from absl import flags

from runner import cli
from common.results import atomic_output, write_results
from report import paired_runs
from report.appendix import to_markdown
from report.uci_table import load_runs

METRICS = ("test_mll", "test_rmse", "elbo", "elbo_aux")


def paired_differences(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
  """Per (dataset, method): means before and after, and the paired difference's mean and
  standard error over the seeds both tables hold."""
  metrics = [m for m in METRICS if m in before.columns and m in after.columns]
  return paired_runs.paired_differences(before, after, group_by=["dataset", "method"],
                                        metrics=metrics)


# (refined method, the method it is compared with, the claim's name), and per refined method the
# prefix of its ELBO_aux > ELBO counts: the VI table's claims, then the VOGN table's.
ABOVE_CLAIMS = (("refined_vi", "vi", "refined_vi_above_vi"),
                ("refined_vi", "vi_equal_compute", "refined_vi_above_equal_compute"),
                ("refined_vogn", "vogn", "refined_vogn_above_vogn"))
REFINED_PREFIXES = (("refined_vi", "refined"), ("refined_vogn", "refined_vogn"))


def conclusions(runs: pd.DataFrame) -> dict[str, int]:
  """The tables' claims, counted over datasets (MLL means) and runs (ELBO_aux > ELBO); a claim
  about a method the runs lack is left out (a comparison of VI alone has none)."""
  means = runs.groupby(["dataset", "method"])["test_mll"].mean().unstack("method")
  counts = {"datasets": len(means)}
  for refined, other, name in ABOVE_CLAIMS:
    if {refined, other} <= set(means.columns):
      counts[name] = int((means[refined] > means[other]).sum())
  for method, prefix in REFINED_PREFIXES:
    refined = runs[runs["method"] == method]
    if len(refined):
      counts[f"{prefix}_runs"] = len(refined)
      counts[f"{prefix}_runs_elbo_aux_above_elbo"] = int(
          (refined["elbo_aux"] > refined["elbo"]).sum())
  return counts


def main(argv):
  del argv
  methods = flags.FLAGS.methods
  before, after = (runs[runs["method"].isin(methods)] for runs in (
      load_runs(flags.FLAGS.before_dir), load_runs(flags.FLAGS.after_dir)))
  # Both sides' conclusions over the same runs: those the rerun has.
  keys = ["dataset", "method", "seed"]
  before = before.merge(after[keys], on=keys)
  table = paired_differences(before, after)
  moved = table[np.abs(table["test_mll_difference"]) > 2 * table["test_mll_difference_se"]]
  totals = {"pairs": int(table["seeds"].sum()), "dataset_methods": len(table),
            "mll_moved_over_2se": len(moved),
            **{f"before_{k}": v for k, v in conclusions(before).items()},
            **{f"after_{k}": v for k, v in conclusions(after).items()}}
  shown = ["dataset", "method", "seeds"] + [
      f"{m}_{part}" for m in ("test_mll", "elbo", "elbo_aux")
      for part in ("before", "after", "difference", "difference_se") if f"{m}_{part}" in table]
  text = [f"# The UCI table before ({flags.FLAGS.before_dir}) and after "
          f"({flags.FLAGS.after_dir}), seed for seed", "",
          "Differences are after minus before, mean ± standard error over the paired seeds; MLL "
          "on the test split, ELBO and ELBO_aux on the training set, original units.", "",
          to_markdown(table[shown], digits=4), "",
          "MLL differences beyond 2 standard errors: " + (
              ", ".join(f"{r.dataset} {r.method}" for r in moved.itertuples()) or "none"), ""]
  text += [f"- {name}: {value}" for name, value in totals.items()]
  with atomic_output(os.path.join(flags.FLAGS.output_dir,
                                  "comparison.md")) as path, open(path, "w") as handle:
    handle.write("\n".join(text) + "\n")
  write_results(flags.FLAGS.output_dir, benchmark="comparisons", dataset="uci_rerun",
                method="paired", seed=0,
                flags={"before_dir": flags.FLAGS.before_dir, "after_dir": flags.FLAGS.after_dir,
                       "methods": methods},
                metrics=totals, timings={})
  print("\n".join(text))


if __name__ == "__main__":
  flags.DEFINE_string("before_dir", None, "The earlier table's runs (a worktree's results/uci).")
  flags.DEFINE_string("after_dir", None, "The rerun's runs.")
  flags.DEFINE_string("output_dir", None, "Where comparison.md and results.json go.")
  flags.DEFINE_list("methods", ["vi", "refined_vi", "vi_equal_compute"],
                    "The methods the rerun changed (the others are left out).")
  cli.run(main)
