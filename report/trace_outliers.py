"""Outlier weight draws in training traces, and the KL excursions that follow them.

  ablation=results/related/ablations/vogn_outlier_draws
  python -m report.trace_outliers --traces=$ablation/traces/vogn_mnist_seed_1.npz,... \
      --labels="VOGN MNIST seed 1,..." --output=$ablation/table.md

A trace.npz (written beside the checkpoints; `report.trace_comparison`) holds,
per step, the minibatch ELBO estimate at that step's weight draw and the KL of
the parameters the draw came from (before the step's update). Their sum is the
draw's expected log-likelihood term, N * mean log p(y | x, w). An outlier draw
is a step whose term falls below the median of the `history` steps before it by
`factor - 1` times that median's magnitude (for a negative median: `factor`
times it): one drawn network badly wrong on its batch. An episode starts at an
outlier draw and lasts at least `horizon` steps and until the KL is back below
1.5 times its value before the draw; further outliers inside it belong to it.
What the KL does in it (its peak, how long it stays above 1.5 times) is what
the draw did to the posterior, as far as the KL can tell.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
from absl import flags

from runner import cli
from common.results import write_text_atomically
from report.trace_comparison import load_trace

RECOVERED_RATIO = 1.5


@dataclasses.dataclass(frozen=True)
class OutlierEpisode:
  """An outlier draw at 1-based `step` and the KL excursion after it."""
  step: int
  num_outliers: int               # outlier draws in the episode, the first included
  largest_factor: float           # the most extreme one's `factor` (term / median if negative)
  kl_before: float
  kl_peak: float
  steps_to_peak: int
  steps_above: int                # steps with the KL at or above 1.5 x kl_before
  steps_to_recover: Optional[int]  # to the last of those, plus one; None: not back by the end


def _factors(values: np.ndarray, median: float) -> np.ndarray:
  """How far below `median` each value is, as `factor`: value / median for a negative median."""
  return 1 + (median - values) / abs(median)


def outlier_episodes(trace: dict[str, np.ndarray], factor: float = 10.0, history: int = 200,
                     horizon: int = 200) -> list[OutlierEpisode]:
  """The trace's outlier episodes in step order (none in its first `history` steps)."""
  kl = trace["kl"]
  log_likelihood = trace["elbo"] + kl
  episodes, index = [], history
  while index < len(kl):
    median = float(np.median(log_likelihood[index - history:index]))
    if not _factors(log_likelihood[index], median) > factor:
      index += 1
      continue
    kl_before = float(kl[index])
    threshold = RECOVERED_RATIO * kl_before
    later = np.arange(index + horizon, len(kl))
    back = later[kl[later] < threshold]
    end = int(back[0]) if back.size else len(kl)
    after = kl[index + 1:end]
    above = np.flatnonzero(after >= threshold)
    factors = _factors(log_likelihood[index:end], median)
    peak = int(np.argmax(after)) + 1 if after.size else 0
    if not above.size:
      steps_to_recover = 0
    elif index + 1 + above[-1] == len(kl) - 1:
      steps_to_recover = None
    else:
      steps_to_recover = int(above[-1]) + 2  # after[j] is the KL j + 1 steps after the draw
    episodes.append(OutlierEpisode(
        step=index + 1, num_outliers=int(np.sum(factors > factor)),
        largest_factor=float(factors.max()),
        kl_before=kl_before, kl_peak=float(kl[index + peak]), steps_to_peak=peak,
        steps_above=len(above), steps_to_recover=steps_to_recover))
    index = end
  return episodes


def summary_row(label: str, trace: dict[str, np.ndarray], episodes: list[OutlierEpisode],
                final_window: int = 5_000) -> dict[str, Any]:
  """One trace's line: its episodes, the one with the largest KL excursion, its final KL."""
  kl = trace["kl"]
  largest = max(episodes, key=lambda e: e.kl_peak / e.kl_before, default=None)
  return {
      "label": label, "steps": len(kl), "episodes": len(episodes),
      "outliers": sum(e.num_outliers for e in episodes),
      "first_step": episodes[0].step if episodes else None,
      "largest_factor": max((e.largest_factor for e in episodes), default=None),
      "largest": largest,
      "steps_above": sum(e.steps_above for e in episodes),
      "final_kl": float(kl[-1]),
      "median_final_kl": float(np.median(kl[-final_window:])),
  }


def _cell(value: Optional[float], template: str) -> str:
  return "–" if value is None else template.format(value)


def _largest_cells(largest: Optional[OutlierEpisode]) -> list[str]:
  """Step, KL peak / before, steps above and recovery of the largest KL excursion."""
  if largest is None:
    return ["–"] * 4
  recovery = ("not by the end" if largest.steps_to_recover is None
              else f"{largest.steps_to_recover:,}")
  return [f"{largest.step:,}", f"{largest.kl_peak / largest.kl_before:.1f}",
          f"{largest.steps_above:,}", recovery]


def to_markdown(rows: list[dict[str, Any]], factor: float, history: int, horizon: int,
                final_window: int = 5_000) -> str:
  lines = [
      "# Outlier weight draws and the KL after them", "",
      (f"Outlier draw: a step whose minibatch expected log-likelihood term is below the median of "
       f"the {history} steps before it by {factor - 1:g} times its magnitude ({factor:g} times "
       f"a negative median). Episode: from an outlier draw, at least {horizon} steps and until "
       f"the KL is back below {RECOVERED_RATIO:g} times its value before the draw; outliers "
       "inside it are counted in it. Steps above: steps with the KL at or above that level."),
      "", ("| run | steps | episodes | outlier draws | first at | most extreme draw / median | "
           "largest KL excursion at | its KL peak / before | its steps above | recovered after "
           f"| steps above, all episodes | final KL | median KL, last {final_window:,} |"),
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  ]
  for row in rows:
    cells = ([row["label"], f"{row['steps']:,}", str(row["episodes"]), str(row["outliers"]),
              _cell(row["first_step"], "{:,}"), _cell(row["largest_factor"], "{:,.0f}")]
             + _largest_cells(row["largest"])
             + [f"{row['steps_above']:,}", f"{row['final_kl']:,.0f}",
                f"{row['median_final_kl']:,.0f}"])
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
    cli.require(len(trace["kl"]) > flags.FLAGS.history,
                f"{path} has {len(trace['kl'])} steps; --history={flags.FLAGS.history} needs more")
    episodes = outlier_episodes(trace, flags.FLAGS.factor, flags.FLAGS.history,
                                flags.FLAGS.horizon)
    rows.append(summary_row(label, trace, episodes))
  text = to_markdown(rows, flags.FLAGS.factor, flags.FLAGS.history, flags.FLAGS.horizon)
  write_text_atomically(flags.FLAGS.output, text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_list("traces", None, "The trace.npz files.", required=True)
  flags.DEFINE_list("labels", None, "One label per trace (default: the paths).")
  flags.DEFINE_string("output", None, "Where the markdown table goes.", required=True)
  flags.DEFINE_float("factor", 10.0, "An outlier's term: this many times a negative median.")
  flags.DEFINE_integer("history", 200, "Steps whose median an outlier is compared with.")
  flags.DEFINE_integer("horizon", 200, "An episode's least length in steps.")
  cli.run(main)
