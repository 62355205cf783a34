"""Figure 4: the ELBO_aux trace of refinement, as CSVs and a plot (matplotlib, Agg, atomic PNG)."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from auxiliary_sampling.refine import RefinementResult
from common.results import save_figure, write_csv_atomically

TRACE_FILENAME = "elbo_aux_trace.csv"
TRACE_STAGES_FILENAME = "stage_elbo_aux.csv"
FIGURE_FILENAME = "figure4_elbo_aux.png"

_SMOOTHING_WINDOW = 20


def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def plot_elbo_aux_staircase(trace: np.ndarray, steps_per_auxiliary: int, initial_elbo: float,
                            elbo_aux: float, title: str, path: str,
                            stage_means: Optional[np.ndarray] = None) -> None:
  """Paper Figure 4: the minibatch ELBO_aux estimate at every refinement step, one line per member.

  ELBO_aux rises after each auxiliary variable (Eq. 13 grows with k); the
  dashed lines mark where a new a_k is sampled and Adam restarts. Beside the
  trace: the starting VI ELBO (the same model's ELBO, estimated with the
  refinement's M draws) and the final whole-data ELBO_aux estimate; with
  `stage_means` ([K + 1]: the VI ELBO, then ELBO_aux after each stage, all on
  the whole training set), the staircase itself as a step line.
  """
  plt = _pyplot()
  figure, axis = plt.subplots(figsize=(7, 3.6))
  plotted = [np.array([initial_elbo, elbo_aux])]
  if len(trace):
    steps = np.arange(1, len(trace) + 1)
    for member in range(trace.shape[1]):
      axis.plot(steps, trace[:, member], color="C0", alpha=0.15, linewidth=0.6)
    window = min(_SMOOTHING_WINDOW, len(trace))
    smoothed = np.convolve(trace.mean(axis=1), np.ones(window) / window, mode="valid")
    axis.plot(steps[window - 1:], smoothed, color="C0",
              label=f"mean over members ({window}-step average)")
    plotted.append(np.percentile(trace, [2, 100]))
  if steps_per_auxiliary:
    for boundary in range(0, len(trace), steps_per_auxiliary):
      axis.axvline(boundary + 0.5, color="grey", linestyle="--", linewidth=0.7)
  axis.axhline(initial_elbo, color="C3",
               label=f"VI ELBO {initial_elbo:.1f} (the refinement's M draws)")
  axis.axhline(elbo_aux, color="C2", label=f"final ELBO_aux {elbo_aux:.1f}")
  if stage_means is not None:
    # Without optimisation steps (the authors' image setting) the stages sit one x-unit apart.
    boundaries = np.arange(len(stage_means)) * max(steps_per_auxiliary, 1)
    axis.step(boundaries, stage_means, where="pre", color="k", marker="o", markersize=3,
              linewidth=1.2, label="whole-training-set ELBO_aux reached by each stage")
    plotted.append(np.asarray(stage_means))
  low, high = min(map(np.min, plotted)), max(map(np.max, plotted))
  margin = 0.1 * (high - low + 1e-9)
  axis.set_ylim(low - margin, high + margin)
  axis.set_xlabel("refinement step (dashed: a new auxiliary variable is sampled)"
                  if steps_per_auxiliary else "auxiliary variable (no optimisation steps)")
  axis.set_ylabel("ELBO_aux (minibatch estimate)")
  axis.set_title(title)
  axis.legend(loc="lower right", fontsize=8)
  figure.tight_layout()
  save_figure(figure, path)
  plt.close(figure)


def write_refinement_trace(output_dir: str, refinement: RefinementResult, steps_per_auxiliary: int,
                           title: str) -> None:
  """Figure 4's data and plot.

  Writes the per-step minibatch ELBO_aux estimate of every member (CSV), the
  whole-training-set ELBO_aux after every stage if measured (CSV; stage 0 is
  the VI model), and the plot.
  """
  trace = refinement.trace
  steps = np.arange(1, len(trace) + 1)
  auxiliary = (steps - 1) // max(steps_per_auxiliary, 1) + 1
  columns = {"step": steps, "auxiliary_variable": auxiliary, "elbo_aux_mean": trace.mean(axis=1)}
  columns.update({f"member_{m}": trace[:, m] for m in range(trace.shape[1])})
  write_csv_atomically(os.path.join(output_dir, TRACE_FILENAME), columns)
  stages = None
  if refinement.stage_elbo_aux is not None:
    start = (refinement.initial_elbo if refinement.stage_elbo_start is None
             else refinement.stage_elbo_start)
    stages = np.concatenate([start[None], refinement.stage_elbo_aux])
    stage_columns = {"auxiliary_variable": np.arange(len(stages)),
                     "step": np.arange(len(stages)) * steps_per_auxiliary,
                     "elbo_aux_mean": stages.mean(axis=1), "elbo_aux_std": stages.std(axis=1)}
    stage_columns.update({f"member_{m}": stages[:, m] for m in range(stages.shape[1])})
    write_csv_atomically(os.path.join(output_dir, TRACE_STAGES_FILENAME), stage_columns)
  plot_elbo_aux_staircase(trace, steps_per_auxiliary, refinement.initial_elbo_estimate,
                          refinement.elbo_aux_estimate, title,
                          os.path.join(output_dir, FIGURE_FILENAME),
                          stage_means=None if stages is None else stages.mean(axis=1))
