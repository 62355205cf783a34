"""Figures the binaries write beside their results (matplotlib, Agg backend, atomic PNGs)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from common.results import save_figure

_SMOOTHING_WINDOW = 20


def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def plot_elbo_aux_staircase(trace: np.ndarray, steps_per_auxiliary: int, initial_elbo: float, elbo_aux: float,
                            title: str, path: str, stage_means: Optional[np.ndarray] = None) -> None:
  """Paper Figure 4: the minibatch ELBO_aux estimate at every refinement step, one line per member.

  ELBO_aux rises after each auxiliary variable (Eq. 13 grows with k); the
  dashed lines mark where a new a_k is sampled and Adam restarts. Beside the
  trace: the starting VI ELBO (the same model's ELBO, estimated with the
  refinement's M draws) and the final whole-data ELBO_aux estimate; with
  `stage_means` ([K + 1]: the VI ELBO, then ELBO_aux after each stage, all on
  the whole training set), the staircase itself as a step line.
  """
  plt = _pyplot()
  steps = np.arange(1, len(trace) + 1)
  figure, axis = plt.subplots(figsize=(7, 3.6))
  for member in range(trace.shape[1]):
    axis.plot(steps, trace[:, member], color="C0", alpha=0.15, linewidth=0.6)
  window = min(_SMOOTHING_WINDOW, max(len(trace), 1))
  smoothed = np.convolve(trace.mean(axis=1), np.ones(window) / window, mode="valid")
  axis.plot(steps[window - 1:], smoothed, color="C0", label=f"mean over members ({window}-step average)")
  if steps_per_auxiliary:
    for boundary in range(0, len(trace), steps_per_auxiliary):
      axis.axvline(boundary + 0.5, color="grey", linestyle="--", linewidth=0.7)
  axis.axhline(initial_elbo, color="C3", label=f"VI ELBO {initial_elbo:.1f} (the refinement's M draws)")
  axis.axhline(elbo_aux, color="C2", label=f"final ELBO_aux {elbo_aux:.1f}")
  if stage_means is not None:
    boundaries = np.arange(len(stage_means)) * steps_per_auxiliary
    axis.step(boundaries, stage_means, where="pre", color="k", marker="o", markersize=3, linewidth=1.2,
              label="whole-training-set ELBO_aux reached by each stage")
  low, high = np.percentile(trace, [2, 100])
  margin = 0.1 * (high - low + 1e-9)
  axis.set_ylim(min(low, initial_elbo) - margin, max(high, elbo_aux) + margin)
  axis.set_xlabel("refinement step (dashed: a new auxiliary variable is sampled)")
  axis.set_ylabel("ELBO_aux (minibatch estimate)")
  axis.set_title(title)
  axis.legend(loc="lower right", fontsize=8)
  figure.tight_layout()
  save_figure(figure, path)
  plt.close(figure)
