"""Two tables of the same runs compared seed for seed: each side's mean and the paired difference.

Used where a change alters the random streams or an estimator but not the
method (the Box-Muller rerun of Table 1, per-batch weight noise): pairing by
seed removes the spread between seeds from the comparison.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def paired_differences(before: pd.DataFrame, after: pd.DataFrame, *, group_by: Sequence[str],
                       metrics: Sequence[str], labels: tuple[str, str] = ("before", "after"),
                       ) -> pd.DataFrame:
  """Per group: the number of seeds both tables hold, and for each metric both sides' means
  (`{metric}_{label}`) and the paired difference after - before, its mean
  (`{metric}_difference`) and standard error (`{metric}_difference_se`; NaN for one seed).

  `before`, `after`: one row per run, with columns `group_by`, "seed" and the metrics; a
  metric missing for a run on either side leaves that run out of the metric's difference.
  """
  keys = [*group_by, "seed"]
  first, second = (f"_{label}" for label in labels)
  paired = before.set_index(keys)[list(metrics)].join(
      after.set_index(keys)[list(metrics)], how="inner", lsuffix=first, rsuffix=second)
  if paired.empty:
    raise ValueError(f"the two tables have no ({', '.join(keys)}) run in common")
  rows = []
  for group, runs in paired.groupby(level=list(group_by)):
    group = group if isinstance(group, tuple) else (group,)
    row = {**dict(zip(group_by, group)), "seeds": len(runs)}
    for metric in metrics:
      difference = (runs[metric + second] - runs[metric + first]).dropna()
      if difference.empty:
        continue
      row[metric + first] = runs[metric + first].mean()
      row[metric + second] = runs[metric + second].mean()
      row[f"{metric}_difference"] = difference.mean()
      row[f"{metric}_difference_se"] = (difference.std(ddof=1) / np.sqrt(len(difference))
                                        if len(difference) > 1 else float("nan"))
    rows.append(row)
  return pd.DataFrame(rows)
