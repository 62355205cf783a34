"""The MISSO note's Figure 1 (the anonymous note "Variational Inference and Dropout", which applies
MISSO to VI; results/related/README.md): the negated ELBO of Bayesian LeNet-5 on MNIST against
epochs, one line per optimiser.

  python -m report.misso_figure --runs_dir=results/related/misso/mnist \\
      --output_dir=results/related/misso

Reads every run folder under `runs_dir` (an `image.main --method=vi` run: its results.json and
its `summaries/vi` events, where the trainer logs the ELBO estimate every 100 steps) and writes
`figure1.png` and `figure1.csv`: -ELBO / N (nats per training example; the one-step estimate
the trainer logs every 100 steps, plotted as a running mean of 5 logs) against epochs = steps *
batch / N, and a table of where each run ends (`figure1.md`: -ELBO / N over the last 5 logs and
on the whole training set, test accuracy and MLL, seconds per epoch). MISSO's first epoch
is its initialisation pass (`methods.trainers.misso`): its line stays flat there by construction.
"""
from __future__ import annotations

import glob
import json
import os

import pandas as pd
from absl import flags

from runner import cli
from report import tables
from report.appendix import to_markdown

LABELS = {("adam", "per_example"): "Adam", ("momentum", "per_example"): "Momentum",
          ("adam", "per_batch"): "Bayes by backprop (Adam, one weight draw per step)",
          ("misso", "per_example"): "MISSO"}
SMOOTHING = 5   # logs in the plotted running mean
TABLE_FILENAME = "figure1.md"
# What the report shows of this module's output, relative to <results>/related (its default
# --output_dir is <results>/related/misso).
RELATED_SECTIONS = (os.path.join("misso", TABLE_FILENAME),)


def run_label(run_flags: dict) -> str:
  """The optimiser's name in the figure, with its step size when several runs share one."""
  key = (run_flags.get("vi_optimizer", "adam"), run_flags.get("vi_weight_noise", "per_example"))
  return f"{LABELS.get(key, ' '.join(key))}, lr {run_flags['learning_rate']:g}"


def elbo_events(summary_dir: str) -> pd.DataFrame:
  """(step, elbo) rows of the `elbo` scalars in a run's event files (every resume's)."""
  import tensorflow as tf  # only to read event files
  rows = []
  for path in sorted(glob.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == "elbo":
          rows.append((int(event.step), float(tf.make_ndarray(value.tensor))))
  frame = pd.DataFrame(rows, columns=["step", "elbo"])
  return frame.drop_duplicates("step", keep="last").sort_values("step")


def load_curves(runs_dir: str) -> tuple[pd.DataFrame, pd.DataFrame]:
  """(curves: run, optimiser, epoch, negated_elbo_per_example; ends: one row per run)."""
  curves, ends = [], []
  for results_path in sorted(glob.glob(os.path.join(runs_dir, "*", "results.json"))):
    folder = os.path.dirname(results_path)
    with open(results_path) as handle:
      run = json.load(handle)
    run_flags, metrics = run["flags"], run["metrics"]
    num_train = metrics["num_train"]
    events = elbo_events(os.path.join(folder, "summaries", "vi"))
    if events.empty:
      raise ValueError(f"{folder}: no ELBO summaries under summaries/vi")
    label = run_label(run_flags)
    epochs = events.step * run_flags["batch_size"] / num_train
    curves.append(pd.DataFrame({"run": os.path.basename(folder), "optimiser": label,
                                "epoch": epochs, "negated_elbo_per_example":
                                -events.elbo / num_train}))
    total_epochs = run_flags["vi_steps"] * run_flags["batch_size"] / num_train
    ends.append({"optimiser": label, "epochs": round(total_epochs, 2),
                 "final -ELBO / N (last 5 logs)": -events.elbo.iloc[-SMOOTHING:].mean() / num_train,
                 "-ELBO / N (whole training set)": -metrics["elbo"] / num_train,
                 "test accuracy": metrics["test_accuracy"], "test MLL": metrics["test_mll"],
                 "seconds per epoch": run["timings"]["train_seconds"] / total_epochs,
                 "commit": run["git_commit"][:7]})
  if not curves:
    raise ValueError(f"no runs (*/results.json) under {runs_dir}")
  return pd.concat(curves, ignore_index=True), pd.DataFrame(ends)


def write_figure(runs_dir: str, output_dir: str) -> str:
  """Writes figure1.png, figure1.csv and figure1.md; returns the markdown."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  curves, ends = load_curves(runs_dir)
  os.makedirs(output_dir, exist_ok=True)
  curves.to_csv(os.path.join(output_dir, "figure1.csv"), index=False)
  figure, axis = plt.subplots(figsize=(6.5, 4.2))
  for label, curve in curves.groupby("optimiser", sort=False):
    smoothed = curve.negated_elbo_per_example.rolling(SMOOTHING, min_periods=1).mean()
    axis.plot(curve.epoch, smoothed, label=label)
  axis.set_xlabel("epoch (steps x batch / N)")
  axis.set_ylabel("negated ELBO / N (nats)")
  axis.set_yscale("log")
  axis.set_title("Bayesian LeNet-5 on MNIST, N(0, 1) priors, batch 128")
  axis.legend(fontsize=7)
  figure.tight_layout()
  figure.savefig(os.path.join(output_dir, "figure1.png"), dpi=120)
  plt.close(figure)
  text = "\n".join(["# MISSO note, Figure 1: negated ELBO of Bayesian LeNet-5 on MNIST", "",
                    to_markdown(ends, digits=4), ""])
  tables.write_text(os.path.join(output_dir, TABLE_FILENAME), text)
  return text


def main(argv):
  del argv
  print(write_figure(flags.FLAGS.runs_dir, flags.FLAGS.output_dir))


if __name__ == "__main__":
  flags.DEFINE_string("runs_dir", "results/related/misso/mnist", "One folder per optimiser run.")
  flags.DEFINE_string("output_dir", "results/related/misso", "Where figure1.* go.")
  cli.run(main)
