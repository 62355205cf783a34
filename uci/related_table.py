"""VOGN and refined VOGN beside the VI family on UCI (issue: the field's other answers).

  python -m uci.related_table --results_dir=results/uci --related_dir=results/related/uci \\
      --output_dir=results/related

Writes `uci_table.md`: test MLL and RMSE (original units of y), the ELBO and
ELBO_aux (original units), the training seconds each method spent, and paired
per-seed differences in MLL, for vi, vi_equal_compute and refined_vi (Table 1's
runs) and vogn and refined_vogn (the same splits, seeds and network; VOGN with
a fixed N(0, 1) prior where VI learns its prior scale), with the blog's squared-gradient
curvature and, as vogn_gauss_newton, with the Gauss-Newton one.
"""
from __future__ import annotations

import os
from typing import Optional

import pandas as pd
from absl import flags

from common import cli, related_table, tables
from uci import table

METHODS = ("vi", "vi_equal_compute", "refined_vi", "vogn", "refined_vogn", "vogn_gauss_newton",
           "refined_vogn_gauss_newton")
METRICS = (("test_mll", "Test MLL", ",.3f"), ("test_rmse", "Test RMSE", ".3g"),
           ("elbo", "ELBO (VI or VOGN posterior)", ",.1f"),
           ("elbo_aux", "ELBO_aux (refined)", ",.1f"))


def write_table(results_dir: str, related_dir: str, output_dir: str,
                gauss_newton_dir: Optional[str] = None) -> str:
  """Writes output_dir/uci_table.md from the folders' runs and returns its text.

  Runs under `gauss_newton_dir` (VOGN with --vogn_curvature=gauss_newton) are listed as the
  methods vogn_gauss_newton and refined_vogn_gauss_newton.
  """
  frames = [table.load_runs(results_dir), table.load_runs(related_dir)]
  if gauss_newton_dir and os.path.isdir(gauss_newton_dir):
    variant = table.load_runs(gauss_newton_dir)
    frames.append(variant.assign(method=variant.method + "_gauss_newton"))
  runs = pd.concat(frames, ignore_index=True)
  runs = runs[runs.method.isin(METHODS)]
  commits = ", ".join(sorted(str(c) for c in runs.git_commit.unique()))
  title = ["# UCI regression: VOGN and refined VOGN beside the VI family", "",
           "Paper Table 1's protocol: random 80/20 splits from seeds 0-4, 50 ReLU units, 30,000 "
           "steps of batch 256, M = 10 refined samples (K = 5, ratio 0.7, 200 steps each). VOGN: "
           "Osawa et al.'s Algorithm 1 with alpha 1e-2, beta_1 0.9, beta_2 0.999, tau 1, gamma 0, "
           "one draw per step, a fixed N(0, 1) prior.", "",
           f"Commands: `uci/run_table.sh --output_root=results/related --methods=\"vogn "
           f"refined_vogn\"` and `python -m uci.related_table`. Runs: {len(runs)}; code commits: "
           f"{commits}."]
  text = related_table.comparison_text(runs, METHODS, METRICS, title, "test_mll")
  tables.write_text(os.path.join(output_dir, "uci_table.md"), text)
  return text


def main(argv):
  del argv
  options = flags.FLAGS
  print(write_table(options.results_dir, options.related_dir, options.output_dir,
                    options.gauss_newton_dir))


if __name__ == "__main__":
  flags.DEFINE_string("results_dir", "results/uci", "Table 1's runs (the VI family).")
  flags.DEFINE_string("related_dir", "results/related/uci", "The related methods' runs.")
  flags.DEFINE_string("gauss_newton_dir", "results/related/vogn_gauss_newton/uci",
                      "VOGN runs with Gauss-Newton curvature (listed as *_gauss_newton).")
  flags.DEFINE_string("output_dir", "results/related", "Where uci_table.md goes.")
  cli.run(main)
