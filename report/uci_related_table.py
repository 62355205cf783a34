"""VOGN, refined VOGN, SVGD and f-SVGD beside the VI family on UCI (issue: the field's other
answers).

  python -m report.uci_related_table --results_dir=results/uci --related_dir=results/related/uci \\
      --output_dir=results/related

Writes `uci_table.md`: test MLL and RMSE (original units of y), the ELBO and
ELBO_aux (original units), the training seconds each method spent, and paired
per-seed differences in MLL, for vi, vi_equal_compute and refined_vi (Table 1's
runs), vogn and refined_vogn (the same splits, seeds and network; VOGN with
a fixed N(0, 1) prior where VI learns its prior scale), with the blog's squared-gradient
curvature and, as vogn_gauss_newton, with the Gauss-Newton one, and svgd and fsvgd (20
particles, the f-POVI paper's training protocol). Also writes `fpovi_table8.md`: our svgd and
fsvgd runs in the f-POVI paper's Table 8 setting (`--fpovi_dir`: two hidden layers of 10 units on
the standard 90/10 splits) beside its published numbers.
"""
from __future__ import annotations

import math
import os
import shlex
from typing import Optional

import pandas as pd
from absl import flags

from runner import cli
from report import related_table, remake_commands, results_loader, tables, uci_table
from uci.config import UciConfig

METHODS = ("vi", "vi_equal_compute", "refined_vi", "vogn", "refined_vogn", "vogn_gauss_newton",
           "refined_vogn_gauss_newton", "svgd", "fsvgd")
FPOVI_TABLE8 = os.path.join(results_loader.DEFAULT_PAPER_DIR, "fpovi_table8_uci.csv")
METRICS = (("test_mll", "Test MLL", ",.3f"), ("test_rmse", "Test RMSE", ".3g"),
           ("calibration_error", "Calibration error (the regression ECE; runs that record it)",
            ".3f"),
           ("elbo", "ELBO (VI or VOGN posterior)", ",.1f"),
           ("elbo_aux", "ELBO_aux (refined)", ",.1f"),
           ("particle_steps", "SVGD and f-SVGD training steps", ",.0f"))


HEADING = "UCI regression: VOGN and refined VOGN beside the VI family"
TABLE_FILENAME = "uci_table.md"
FPOVI_FILENAME = "fpovi_table8.md"
# What the report shows of this module's output, relative to its default --output_dir
# (<results>/related).
RELATED_SECTIONS = (TABLE_FILENAME, FPOVI_FILENAME)


def write_table(results_dir: str, related_dir: str, output_dir: str,
                gauss_newton_dir: Optional[str] = None, heading: str = HEADING,
                table_command: str = "python -m report.uci_related_table") -> str:
  """Writes output_dir/uci_table.md from the folders' runs and returns its text.

  Runs under `gauss_newton_dir` (VOGN with --vogn_curvature=gauss_newton) are listed as the
  methods vogn_gauss_newton and refined_vogn_gauss_newton; `heading` titles the table (an
  ablation's runs of the related methods get their own); `table_command` is the command the
  file says wrote it.
  """
  frames = [uci_table.load_runs(results_dir), uci_table.load_runs(related_dir)]
  if gauss_newton_dir and os.path.isdir(gauss_newton_dir):
    variant = uci_table.load_runs(gauss_newton_dir)
    frames.append(variant.assign(method=variant.method + "_gauss_newton"))
  runs = pd.concat(frames, ignore_index=True)
  runs = runs[runs.method.isin(METHODS)]
  title = [f"# {heading}", "",
           "Paper Table 1's protocol: random 80/20 splits from seeds 0-4, 50 ReLU units, 30,000 "
           "steps of batch 256, M = 10 refined samples (K = 5, ratio 0.7, 200 steps each). VOGN: "
           "Osawa et al.'s Algorithm 1 with alpha 1e-2, beta_1 0.9, beta_2 0.999, tau 1, gamma 0, "
           "one draw per step, a fixed N(0, 1) prior. SVGD and f-SVGD: 20 particles of the same "
           "network, Adam 4e-3 on -phi, batch 100 for 500 epochs (1000 for 3000 past 900 "
           "training examples) unless the commands at the end set --particle_epochs or "
           "--particle_batch_size (each run's steps are tabled below), the f-POVI paper's "
           "priors.", "",
           calibration_note(runs), "",
           related_table.provenance(runs)]
  text = related_table.comparison_text(runs, METHODS, METRICS, title, "test_mll", UciConfig,
                                       table_command)
  tables.write_text(os.path.join(output_dir, TABLE_FILENAME), text)
  return text


def calibration_note(runs: pd.DataFrame) -> str:
  """What the calibration error measures, and the score sampling alone gives a perfectly
  calibrated predictive on each dataset's test split (`regression.calibration_error_floor`)."""
  # uci.regression loads TensorFlow: imported here, so the report (which names this module's
  # outputs) starts without it.
  from uci import regression  # pylint: disable=import-outside-toplevel
  sizes = runs.dropna(subset=["num_test"]).groupby("dataset")["num_test"].unique()
  mixed = [dataset for dataset, values in sizes.items() if len(values) > 1]
  if mixed:
    raise ValueError(f"runs of {', '.join(mixed)} have test splits of different sizes; allowed: "
                     "one split protocol per table")
  sizes = sizes.map(lambda values: values[0])
  floors = ", ".join(f"{dataset} {regression.calibration_error_floor(int(size)):.3f}"
                     for dataset, size in sizes.items())
  return ("Calibration error: the mean over levels p = 0.05, ..., 0.95 of |p - the share of test "
          "labels at or below the predictive's p-quantile| (the regression counterpart of ECE). "
          f"A perfectly calibrated predictive scores about this from sampling alone: {floors}.")


def fpovi_table8_text(runs_dir: str,
                      table_command: str = "python -m report.uci_related_table") -> str:
  """Our svgd and fsvgd runs under `runs_dir` (the Table 8 setting) beside the f-POVI paper's
  Table 8: test NLL (-MLL) and RMSE, mean and standard error over the splits run."""
  runs = uci_table.load_runs(runs_dir)
  paper = pd.read_csv(FPOVI_TABLE8).set_index(["dataset", "method"])
  lines = ["# The f-POVI paper's Table 8 setting: SVGD and f-SVGD, ours beside the published", "",
           "Two hidden layers of 10 ReLU units, the standard 90/10 protocol's splits (split = "
           "seed), 20 particles, Adam 4e-3, batch 100 x 500 epochs (1000 x 3000 past 900 training "
           "examples). Mean ± standard error over the splits run (the paper: its parentheses); "
           "the last column divides the NLL difference by both standard errors combined. Our "
           "90/10 permutations are our own, seeded by the split number (the published index "
           "files are not among our checksummed files).",
           "", related_table.provenance(runs), "",
           "| dataset | method | splits | NLL (ours) | NLL (paper) | RMSE (ours) | RMSE (paper) "
           "| ours − paper, NLL, in combined s.e. |", "|---|---|---|---|---|---|---|---|"]
  for (dataset, method), group in runs.groupby(["dataset", "method"]):
    nll, rmse = -group.test_mll.astype(float), group.test_rmse.astype(float)
    count = len(group)

    def ours(values):
      error = values.std(ddof=1) / math.sqrt(count) if count > 1 else math.nan
      return tables.cell(values.mean(), error, 3 if abs(values.mean()) < 1 else 2)
    if (dataset, method) in paper.index:
      published = paper.loc[(dataset, method)]
      paper_nll = f"{published.nll_mean:.2f} ± {published.nll_se:.2f}"
      paper_rmse = f"{published.rmse_mean:.2f} ± {published.rmse_se:.2f}"
      ours_se = nll.std(ddof=1) / math.sqrt(count) if count > 1 else 0.0
      # The paper's "0.00" standard errors are rounded: at least half its last digit.
      gap = (nll.mean() - published.nll_mean) / math.hypot(ours_se,
                                                            max(published.nll_se, 0.005))
      gap_text = f"{gap:+.1f}"
    else:
      paper_nll = paper_rmse = gap_text = "–"
    lines.append(f"| {dataset} | {related_table.METHOD_TITLES.get(method, method)} | {count} | "
                 f"{ours(nll)} | {paper_nll} | {ours(rmse)} | {paper_rmse} | {gap_text} |")
  lines += remake_commands.commands_section(runs, UciConfig, table_command)
  return "\n".join(lines) + "\n"


def _command() -> str:
  """This invocation as a command: the flags given away from their defaults, quoted."""
  given = [f"--{name}={shlex.quote(str(flags.FLAGS[name].value))}"
           for name in ("results_dir", "related_dir", "gauss_newton_dir", "fpovi_dir",
                        "output_dir", "heading")
           if flags.FLAGS[name].value != flags.FLAGS[name].default]
  return " ".join(["python -m report.uci_related_table", *given])


def main(argv):
  del argv
  options = flags.FLAGS
  print(write_table(options.results_dir, options.related_dir, options.output_dir,
                    options.gauss_newton_dir, options.heading, _command()))
  if os.path.isdir(options.fpovi_dir):
    text = fpovi_table8_text(options.fpovi_dir, _command())
    tables.write_text(os.path.join(options.output_dir, FPOVI_FILENAME), text)
    print(text)


if __name__ == "__main__":
  flags.DEFINE_string("results_dir", "results/uci", "Table 1's runs (the VI family).")
  flags.DEFINE_string("related_dir", "results/related/uci", "The related methods' runs.")
  flags.DEFINE_string("gauss_newton_dir", "results/related/vogn_gauss_newton/uci",
                      "VOGN runs with Gauss-Newton curvature (listed as *_gauss_newton).")
  flags.DEFINE_string("fpovi_dir", "results/related/fpovi_table8/uci",
                      "svgd and fsvgd runs in the f-POVI paper's Table 8 setting.")
  flags.DEFINE_string("output_dir", "results/related", "Where uci_table.md goes.")
  flags.DEFINE_string("heading", HEADING, "uci_table.md's heading.")
  cli.run(main)
