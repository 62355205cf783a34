"""Two training traces (VI, VOGN) side by side: minibatch ELBO and KL averaged around given steps.

  ablation=results/ablations/mnist_initial_posterior_scale
  python -m report.trace_comparison \
      --baseline=results/image/mnist/vi_checkpoints/seed_0/trace.npz \
      --variant=$ablation/untransformed_-4/vi_checkpoints/seed_0/trace.npz \
      --output=$ablation/trace_comparison.md

Each trace.npz (written beside the VI checkpoints) holds the per-step minibatch
ELBO estimate (`trace`, whole-dataset scale) and the KL (`kl_trace`). A
variant that is still training is compared over the steps it has reached.
"""
from __future__ import annotations

import numpy as np
from absl import flags

from runner import cli
from common.results import write_text_atomically

STEPS = (1_000, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 20_000, 25_000, 30_000)


def load_trace(path: str) -> dict[str, np.ndarray]:
  with np.load(path) as data:
    missing = {"trace", "kl_trace"} - set(data.files)
    if missing:
      raise ValueError(
          f"{path} has no {', '.join(sorted(missing))} "
          "(a training trace.npz has trace and kl_trace)")
    return {
        "elbo": np.asarray(data["trace"], np.float64),
        "kl": np.asarray(data["kl_trace"], np.float64)
    }


def windowed_mean(values: np.ndarray, step: int, window: int) -> float:
  """Mean of the `window` values ending at 1-based `step` (NaN if the trace is shorter)."""
  if step > len(values) or step < 1:
    return float("nan")
  return float(np.mean(values[max(0, step - window):step]))


def comparison_rows(baseline: dict, variant: dict, steps=STEPS, window: int = 500) -> list[dict]:
  rows = []
  for step in steps:
    row = {"step": step}
    for name, trace in (("baseline", baseline), ("variant", variant)):
      row[f"{name}_elbo"] = windowed_mean(trace["elbo"], step, window)
      row[f"{name}_kl"] = windowed_mean(trace["kl"], step, window)
    row["elbo_difference"] = row["variant_elbo"] - row["baseline_elbo"]
    rows.append(row)
  return rows


def to_markdown(rows: list[dict], baseline: str, variant: str, window: int) -> str:
  lines = [
      f"# Training traces: {variant} against {baseline}", "",
      (f"Minibatch ELBO and KL (whole-dataset scale), mean of the {window} steps ending at "
       "each step."),
      "", "| step | baseline ELBO | variant ELBO | variant - baseline | baseline KL | variant KL |",
      "|---|---|---|---|---|---|"
  ]
  for row in rows:
    cells = [f"{row['step']:,}"] + [
        ("–" if np.isnan(row[key]) else f"{row[key]:,.0f}")
        for key in ("baseline_elbo", "variant_elbo", "elbo_difference", "baseline_kl", "variant_kl")
    ]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  cli.require(flags.FLAGS.window >= 1, f"--window={flags.FLAGS.window} must be >= 1")
  rows = comparison_rows(load_trace(flags.FLAGS.baseline), load_trace(flags.FLAGS.variant),
                         window=flags.FLAGS.window)
  text = to_markdown(rows, flags.FLAGS.baseline, flags.FLAGS.variant, flags.FLAGS.window)
  write_text_atomically(flags.FLAGS.output, text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("baseline", None, "The reference trace.npz.", required=True)
  flags.DEFINE_string("variant", None, "The trace.npz to compare.", required=True)
  flags.DEFINE_string("output", None, "Where the markdown table goes.", required=True)
  flags.DEFINE_integer("window", 500, "Steps averaged at each reported step.")
  cli.run(main)
