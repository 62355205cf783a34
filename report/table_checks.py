"""The checks every benchmark table reports, and its timings, as data and as checks.md text.

ELBO_aux >= ELBO per run (the paper's Proposition 1), refined VI against VI per metric, our means
in units of the paper's standard deviations, and the machine time the runs cost. `report.uci_table`,
`report.image_table` and the report (`report.paper_comparison`) all call these.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from report.tables import METRIC_TITLES, SMOKE_NOTE, missing


def paper_sigma(ours, paper_mean, paper_std) -> Optional[float]:
  """(ours - paper) / paper std; None when a value is missing or the paper's std is 0."""
  if any(missing(v) for v in (ours, paper_mean, paper_std)) or paper_std == 0:
    return None
  return float((ours - paper_mean) / paper_std)


def is_beyond(sigma: Optional[float], limit: float = 2.0) -> bool:
  """|sigma| > limit, up to float round-off (the paper's 3-place numbers give exact ratios)."""
  return sigma is not None and round(abs(sigma), 9) > limit


def paper_deviations(table: pd.DataFrame, comparisons: Sequence[tuple[str, str]]) -> pd.DataFrame:
  """Per dataset, method and compared metric: ours, the paper's mean and std, and `sigma`.

  `comparisons` lists (our metric, paper stem) pairs. The paper's ELBO column holds ELBO_aux for
  refined VI and the ELBO for the other methods, so each method is compared on its own bound
  only. Cells the paper does not report are left out; `sigma` is None where its std is 0.
  """
  rows = []
  for _, row in table.iterrows():
    for metric, stem in comparisons:
      if (row["method"] == "refined_vi") != (metric == "elbo_aux") and metric.startswith("elbo"):
        continue
      ours, paper, std = (row.get(f"{metric}_mean"), row.get(f"paper_{stem}_mean"),
                          row.get(f"paper_{stem}_std"))
      if any(missing(v) for v in (ours, paper, std)):
        continue
      rows.append({"dataset": row["dataset"], "method": row["method"], "metric": metric,
                   "ours": ours, "paper_mean": paper, "paper_std": std,
                   "sigma": paper_sigma(ours, paper, std)})
  return pd.DataFrame(rows, columns=["dataset", "method", "metric", "ours", "paper_mean",
                                     "paper_std", "sigma"])


def elbo_aux_holds(runs: pd.DataFrame) -> pd.DataFrame:
  """The refined VI runs with a boolean `holds`: ELBO_aux >= the same run's VI ELBO."""
  refined = runs[runs["method"] == "refined_vi"]
  if not len(refined) or "elbo_aux" not in refined:
    return refined.assign(holds=pd.Series(dtype=bool))
  return refined.assign(holds=refined["elbo_aux"] >= refined["elbo"])


def refined_vs_vi(table: pd.DataFrame, metric: str) -> tuple[list[str], list[str]]:
  """(datasets where refined VI's mean `metric` >= VI's, datasets that have both methods)."""
  indexed = table.set_index(["dataset", "method"])
  compared = [
      d for d in sorted(table["dataset"].unique())
      if (d, "refined_vi") in indexed.index and (d, "vi") in indexed.index
  ]
  if f"{metric}_mean" not in table:
    return [], compared
  column = f"{metric}_mean"
  better = [
      d for d in compared
      if indexed.loc[(d, "refined_vi"), column] >= indexed.loc[(d, "vi"), column]
  ]
  return better, compared


def checks(runs: pd.DataFrame, table: pd.DataFrame, comparisons: Sequence[tuple[str, str]],
           higher_is_better: Sequence[str] = ("test_mll",), smoke: bool = False) -> str:
  """The checks: ELBO_aux >= ELBO per run, refined VI against VI, ours against the paper.

  Refined VI is set against VI per metric, ours against the paper in its stds (not for `smoke`
  runs, `./run_all.sh --scale=smoke`'s tiny settings).
  `comparisons` lists (our metric, paper stem) pairs to put in paper-std units.
  """
  lines = ["# Checks", ""]
  refined = elbo_aux_holds(runs)
  if len(refined) and "elbo_aux" in refined:
    lines.append(
        "- ELBO_aux >= ELBO (same run's VI model): "
        f"{int(refined['holds'].sum())} of {len(refined)} dataset-seed runs."
    )
    for _, row in refined[~refined["holds"]].iterrows():
      lines.append(
          f"  - fails: {row['dataset']} seed {row['seed']}: "
          f"{row['elbo_aux']:.1f} < {row['elbo']:.1f}"
      )
    gains = (refined["elbo_aux"] - refined["elbo"]).groupby(refined["dataset"]).mean()
    lines.append("- Mean ELBO_aux - ELBO per dataset: " +
                 ", ".join(f"{d} {g:+.1f}" for d, g in gains.items()))
  for metric in higher_is_better:
    if f"{metric}_mean" not in table:
      continue
    better, compared = refined_vs_vi(table, metric)
    worse = sorted(set(compared) - set(better))
    lines.append(
        f"- Refined VI mean {METRIC_TITLES[metric]} >= VI mean {METRIC_TITLES[metric]} "
        f"on {len(better)} of "
        f"{len(compared)} datasets" + (f" (not on: {', '.join(worse)})" if worse else ""))
  best = []
  for dataset in sorted(table["dataset"].unique()):
    candidates = table[(table["dataset"] == dataset)].set_index("method")["test_mll_mean"]
    best.append(f"{dataset}: {candidates.idxmax()}")
  lines.append("- Best mean MLL per dataset: " + "; ".join(best))
  if smoke:
    return "\n".join(lines + ["", SMOKE_NOTE]) + "\n"
  lines += [
      "", "## Our mean against the paper's mean, in units of the paper's std", "",
      "| dataset | method | metric | ours | paper | (ours - paper) / paper std |",
      "|---|---|---|---|---|---|"
  ]
  for _, row in paper_deviations(table, comparisons).iterrows():
    start = (f"| {row['dataset']} | {row['method']} | {row['metric']} | {row['ours']:,.3f} | "
             f"{row['paper_mean']:,.3f} | ")
    if missing(row["sigma"]):
      lines.append(start + f"paper std 0 (difference {row['ours'] - row['paper_mean']:+.3f}) |")
      continue
    flag = " **outside 2 std**" if is_beyond(row["sigma"]) else ""
    lines.append(start + f"{row['sigma']:+.1f}{flag} |")
  return "\n".join(lines) + "\n"


def machine_time(runs: pd.DataFrame) -> tuple[float, int]:
  """(The runs' machine seconds summed, the number of runs).

  A run's machine seconds are its `total_seconds`, the wall time of the process that wrote it.
  A run that resumed its own training (`<method>_resumed_from_step` > 0) was made by several
  processes: it counts at least its training, whose `train_seconds` sums every process's steps,
  plus its evaluation. VI training shared by the vi, refined_vi and vi_equal_compute runs counts
  once (in the vi run: the others resume VI's finished fit, which is not resuming their own).
  """
  if "total_seconds" not in runs:
    return 0.0, int(len(runs))
  seconds = runs["total_seconds"].astype(float).copy()
  for index, run in runs.iterrows():
    resumed = run.get(f"{run['method']}_resumed_from_step")
    if resumed is not None and not pd.isna(resumed) and resumed > 0:
      parts = (run.get("train_seconds"), run.get("evaluate_seconds"))
      seconds[index] = max(seconds[index], sum(0.0 if part is None or pd.isna(part) else part
                                               for part in parts))
  return float(seconds.sum()), int(len(runs))


def timings(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
  """Per dataset the mean wall time of each method's parts and the refine/train ratio.

  Also the total machine time over all runs.
  """
  frame = runs.copy()
  per_dataset = frame.pivot_table(index="dataset", columns="method", values="train_seconds",
                                  aggfunc="mean")
  per_dataset.columns = [f"{c}_train_seconds" for c in per_dataset.columns]
  refined = frame[frame["method"] == "refined_vi"]
  if len(refined):
    ratio = refined["refine_seconds"] / refined["train_seconds"]
    per_dataset["refine_seconds"] = refined.groupby("dataset")["refine_seconds"].mean()
    per_dataset["refine_to_vi_train_ratio"] = ratio.groupby(refined["dataset"]).mean()
  extra = frame[frame["method"] == "vi_equal_compute"]
  if len(extra) and "extra_train_seconds" in extra:
    per_dataset["equal_compute_extra_seconds"] = extra.groupby(
        "dataset")["extra_train_seconds"].mean()
  seconds, num_runs = machine_time(frame)
  totals = {
      "total_machine_seconds":
          seconds,
      "num_runs":
          num_runs,
      "mean_refine_to_vi_train_ratio":
          float(np.mean(refined["refine_seconds"] /
                        refined["train_seconds"])) if len(refined) else float("nan")
  }
  return per_dataset.reset_index(), totals
