"""Outlier weight draws in training traces, and the KL excursions that follow them.

  root=results/related/image
  python -m image.trace_outliers \
      --traces=$root/mnist/vi_checkpoints/seed_1/vogn/trace.npz,... \
      --labels="MNIST seed 1,..." --output=results/related/ablations/vogn_outlier_draws/table.md

A trace.npz (written beside the checkpoints; `image.trace_comparison`) holds,
per step, the minibatch ELBO estimate at that step's weight draw and the KL.
Their sum is the draw's expected log-likelihood term, N * mean log p(y | x, w).
An outlier draw is a step whose term is `factor` times the median of the
`history` steps before it: one drawn network that is badly wrong on its batch.
What follows it is read from the KL, a function of the variational parameters
alone: how far it rises within `horizon` steps, after how many, and how long
until it is back below 1.5 times its value before the draw. Under VOGN such a
draw's gradient enters the momentum and moves the mean by alpha / (s + delta~)
times it for some 30 steps, which the KL records.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from absl import flags

from common import cli
from common.results import write_text_atomically
from image.trace_comparison import load_trace

RECOVERED_RATIO = 1.5


@dataclasses.dataclass(frozen=True)
class OutlierDraw:
  """One outlier draw: its 1-based step, and the KL excursion after it."""
  step: int
  log_likelihood: float
  median_log_likelihood: float
  kl_before: float
  kl_peak: float
  steps_to_peak: int
  steps_to_recover: Optional[int]  # None: the KL was not back by the trace's end


def outlier_draws(trace: dict[str, np.ndarray], factor: float = 10.0, history: int = 200,
                  horizon: int = 200) -> list[OutlierDraw]:
  """The trace's outlier draws in step order; the search resumes `horizon` steps after each."""
  kl = trace["kl"]
  log_likelihood = trace["elbo"] + kl
  draws, index = [], history
  while index < len(kl):
    median = float(np.median(log_likelihood[index - history:index]))
    if not log_likelihood[index] < factor * median:
      index += 1
      continue
    kl_before = float(kl[index - 1])
    peak = index + int(np.argmax(kl[index:index + horizon]))
    below = np.flatnonzero(kl[peak:] < RECOVERED_RATIO * kl_before)
    draws.append(OutlierDraw(
        step=index + 1, log_likelihood=float(log_likelihood[index]),
        median_log_likelihood=median, kl_before=kl_before, kl_peak=float(kl[peak]),
        steps_to_peak=peak - index,
        steps_to_recover=int(peak - index + below[0]) if below.size else None))
    index += horizon
  return draws


def summary_row(label: str, trace: dict[str, np.ndarray], draws: list[OutlierDraw],
                final_window: int = 5_000) -> dict:
  """One trace's line: how many outlier draws, the largest, and where its KL ended."""
  kl = trace["kl"]
  largest = max(draws, key=lambda d: d.kl_peak / d.kl_before, default=None)
  return {
      "label": label, "steps": len(kl), "draws": len(draws),
      "first_step": draws[0].step if draws else None,
      "largest_step": largest.step if largest else None,
      "largest_ratio": largest.log_likelihood / largest.median_log_likelihood
                       if largest else None,
      "largest_kl_ratio": largest.kl_peak / largest.kl_before if largest else None,
      "largest_recovery": largest.steps_to_recover if largest else None,
      "steps_above": sum((d.steps_to_recover if d.steps_to_recover is not None
                          else len(kl) - d.step + 1) for d in draws),
      "final_kl": float(kl[-1]),
      "median_final_kl": float(np.median(kl[-final_window:])),
  }


def _cell(value, template: str) -> str:
  return "–" if value is None else template.format(value)


def _recovery_cell(row: dict) -> str:
  if row["largest_step"] is None:
    return "–"
  if row["largest_recovery"] is None:
    return "not by the end"
  return f"{row['largest_recovery']:,}"


def to_markdown(rows: list[dict], factor: float, history: int, horizon: int) -> str:
  lines = [
      "# Outlier weight draws and the KL after them", "",
      (f"An outlier draw: a step whose minibatch expected log-likelihood is {factor:g} times the "
       f"median of the {history} steps before it. Its KL excursion: the largest KL within "
       f"{horizon} steps over the KL before the draw; recovered: back below "
       f"{RECOVERED_RATIO:g} times that. Steps above: summed over the draws, steps until "
       "recovered (to the end if never)."),
      "", ("| run | steps | outlier draws | first at | largest KL excursion at | its batch "
           "log-lik. / median | KL peak / before | recovered after | steps above | final KL | "
           "median KL, last 5,000 |"),
      "|---|---|---|---|---|---|---|---|---|---|---|"
  ]
  for row in rows:
    cells = [row["label"], f"{row['steps']:,}", str(row["draws"]),
             _cell(row["first_step"], "{:,}"), _cell(row["largest_step"], "{:,}"),
             _cell(row["largest_ratio"], "{:,.0f}"), _cell(row["largest_kl_ratio"], "{:.1f}"),
             _recovery_cell(row), f"{row['steps_above']:,}", f"{row['final_kl']:,.0f}",
             f"{row['median_final_kl']:,.0f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  paths, labels = flags.FLAGS.traces, flags.FLAGS.labels or flags.FLAGS.traces
  cli.require(len(labels) == len(paths),
              f"--labels has {len(labels)} entries for {len(paths)} --traces")
  cli.require(flags.FLAGS.factor > 1, f"--factor={flags.FLAGS.factor} must be > 1")
  for name in ("history", "horizon"):
    cli.require(flags.FLAGS[name].value >= 1, f"--{name}={flags.FLAGS[name].value} must be >= 1")
  rows = []
  for label, path in zip(labels, paths):
    trace = load_trace(path)
    draws = outlier_draws(trace, flags.FLAGS.factor, flags.FLAGS.history, flags.FLAGS.horizon)
    rows.append(summary_row(label, trace, draws))
  text = to_markdown(rows, flags.FLAGS.factor, flags.FLAGS.history, flags.FLAGS.horizon)
  write_text_atomically(flags.FLAGS.output, text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_list("traces", None, "The trace.npz files.", required=True)
  flags.DEFINE_list("labels", None, "One label per trace (default: the paths).")
  flags.DEFINE_string("output", None, "Where the markdown table goes.", required=True)
  flags.DEFINE_float("factor", 10.0, "How many times the median log-likelihood an outlier is.")
  flags.DEFINE_integer("history", 200, "Steps whose median an outlier is compared with.")
  flags.DEFINE_integer("horizon", 200, "Steps after a draw searched for the KL's peak.")
  cli.run(main)
