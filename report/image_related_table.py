"""VOGN and refined VOGN beside the VI family and the baselines on LeNet-5 (issue: the field's other
answers).

  python -m report.image_related_table --results_dir=results/image \\
      --related_dir=results/related/image --output_dir=results/related

Writes `image_table.md`: test MLL, accuracy, ECE and Brier score of the M = 10
predictive, the ELBO and ELBO_aux on the whole training set, the training
seconds each method spent, and paired per-seed differences in MLL, for Table
2's runs (VI, VI with equal compute, refined VI, MNF, the deep ensemble) and
VOGN's (the same LeNet-5, split, seeds and 30,000 steps of batch 256; VOGN
with its fixed N(0, 1) prior where VI learns one prior scale per tensor).
"""
from __future__ import annotations

import os

import pandas as pd
from absl import flags

from runner import cli
from image.config import ImageConfig
from report import image_table, related_table, tables

METHODS = ("deep_ensemble", "mnf", "vi", "vi_equal_compute", "refined_vi", "vogn", "refined_vogn")
METRICS = (("test_mll", "Test MLL", ",.4f"), ("test_accuracy", "Test accuracy", ".4f"),
           ("ece", "ECE", ".4f"), ("brier", "Brier score", ".4f"),
           ("elbo", "ELBO (VI or VOGN posterior)", ",.0f"),
           ("elbo_aux", "ELBO_aux (refined)", ",.0f"))
TABLE_FILENAME = "image_table.md"
# What the report shows of this module's output, relative to its default --output_dir
# (<results>/related).
RELATED_SECTIONS = (TABLE_FILENAME,)


def write_table(results_dir: str, related_dir: str, output_dir: str) -> str:
  """Writes output_dir/image_table.md from both folders' runs and returns its text."""
  runs = pd.concat([image_table.load_runs(results_dir), image_table.load_runs(related_dir)],
                   ignore_index=True)
  runs = runs[runs.method.isin(METHODS)]
  if runs.empty:
    raise cli.UsageError(f"no LeNet-5 runs of {', '.join(METHODS)} under --results_dir="
                         f"{results_dir} or --related_dir={related_dir}")
  title = ["# LeNet-5: VOGN and refined VOGN beside the VI family (paper Table 2's protocol)", "",
           "The standard train/test split, LeNet-5 with per-channel standardised inputs, batch "
           "256, 30,000 steps, M = 10 draws or refined samples (K = 5, ratio 0.7, 200 steps "
           "each). VOGN: Osawa et al.'s Algorithm 1 with alpha 1e-2, beta_1 0.9, beta_2 0.999, "
           "tau 1, gamma 0, one weight draw per step, a fixed N(0, 1) prior (VI learns one "
           "prior scale per tensor).", "",
           related_table.provenance(runs)]
  text = related_table.comparison_text(runs, METHODS, METRICS, title, "test_mll", ImageConfig,
                                       "python -m report.image_related_table")
  tables.write_text(os.path.join(output_dir, TABLE_FILENAME), text)
  return text


def main(argv):
  del argv
  options = flags.FLAGS
  print(write_table(options.results_dir, options.related_dir, options.output_dir))


if __name__ == "__main__":
  flags.DEFINE_string("results_dir", "results/image", "Table 2's runs (the VI family, baselines).")
  flags.DEFINE_string("related_dir", "results/related/image", "VOGN's LeNet-5 runs.")
  flags.DEFINE_string("output_dir", "results/related", "Where image_table.md goes.")
  cli.run(main)
