"""VOGN's step against the VI step it replaces, on the UCI network and on LeNet-5.

  python -m benchmarks.vogn_speed --output_dir=results/benchmarks/vogn_speed

Each measurement runs in its own process, in interleaved rounds (median
reported): mean-field VI with Adam (`GradientUpdate`) and VOGN with
squared-gradient and Gauss-Newton curvature (`VognUpdate`), batch 256, on
the paper's UCI network (13-50-1, Gaussian head, 455 synthetic examples) and
LeNet-5 (synthetic 28x28 digits, 10 classes). Times exclude the traced
warm-up, which is reported separately.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

from absl import flags

from benchmarks import fresh_process
from runner import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

BATCH = 256
NETWORKS = ("uci", "lenet5")
TRAINERS = ("vi", "vogn_squared_gradients", "vogn_gauss_newton")
LEARNING_RATE = 1e-5


def _workload(network: str):
  """(model, inputs, labels, log-likelihood) of a network on synthetic data of its shape."""
  import numpy as np
  rng = np.random.default_rng(0)
  if network == "uci":
    from methods.trainers.gaussian_head import gaussian_head_log_likelihood
    from uci.networks import mean_field_network
    inputs = rng.normal(size=(455, 13)).astype(np.float32)
    labels = rng.normal(size=(455, 1)).astype(np.float32)
    return (mean_field_network(50, 1.0, None, False), inputs, labels,
            gaussian_head_log_likelihood)
  from auxiliary_sampling.predictive import categorical_log_likelihood
  from image.lenet import mean_field_lenet5
  inputs = rng.normal(size=(1024, 28, 28, 1)).astype(np.float32)
  labels = rng.integers(0, 10, size=(1024,)).astype(np.int32)
  return mean_field_lenet5(None, 10, False, -4.0), inputs, labels, categorical_log_likelihood


def measure(network: str, trainer: str, steps: int) -> dict:
  """ms per step of `trainer` on `network`, after a traced warm-up of 2 steps."""
  import tensorflow as tf
  from auxiliary_sampling.adam import Adam
  from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
  from auxiliary_sampling.training_batches import UniformBatches
  from auxiliary_sampling.training_loop import TrainingLoop
  from methods.trainers.vogn import vogn_loop
  from methods.trainers.vogn_settings import VognSettings
  tf.random.set_seed(0)
  model, inputs, labels, log_likelihood = _workload(network)
  model(inputs[:1])
  if trainer == "vi":
    loop = TrainingLoop(ElboObjective(model, log_likelihood),
                        GradientUpdate(Adam(model.trainable_variables)),
                        UniformBatches(inputs, labels, BATCH))
  else:
    settings = VognSettings(curvature=trainer[len("vogn_"):])
    loop = vogn_loop(model, inputs, labels, log_likelihood, settings, BATCH)
  # A step size small enough that no trainer diverges on random data: the step's cost does not
  # depend on it (Gauss-Newton VOGN on random LeNet-5 labels diverged at 1e-3).
  started = time.perf_counter()
  loop.maximize(2, LEARNING_RATE)
  warm_up = time.perf_counter() - started
  started = time.perf_counter()
  loop.maximize(steps, LEARNING_RATE)
  seconds = time.perf_counter() - started
  return {"ms_per_step": 1000 * seconds / steps, "warm_up_seconds": warm_up,
          "threads": os.environ.get("TF_NUM_INTRAOP_THREADS", "default")}


def main(argv):
  del argv
  options = flags.FLAGS
  if options.only:
    network, _, trainer = options.only.partition("/")
    cli.require(network in NETWORKS and trainer in TRAINERS,
                f"--only={options.only!r} is not allowed; allowed: <network>/<trainer> with "
                f"network in {', '.join(NETWORKS)} and trainer in {', '.join(TRAINERS)}")
    steps = options.uci_steps if network == "uci" else options.lenet5_steps
    print(json.dumps(measure(network, trainer, steps)))
    return
  cli.require(bool(options.output_dir), "--output_dir is required")
  cli.require(options.uci_steps >= 1 and options.lenet5_steps >= 1 and options.rounds >= 1,
              "--uci_steps, --lenet5_steps and --rounds must be >= 1")
  keys = [f"{network}/{trainer}" for network in NETWORKS for trainer in TRAINERS]

  def measure_one(key):
    return fresh_process.measure(
        "benchmarks.vogn_speed", [f"--only={key}", f"--uci_steps={options.uci_steps}",
                                  f"--lenet5_steps={options.lenet5_steps}"],
        {"TF_NUM_INTRAOP_THREADS": "1" if key.startswith("uci") else None})

  samples = fresh_process.interleaved_rounds(keys, options.rounds, measure_one)
  results = {key: {"ms_per_step": statistics.median(r["ms_per_step"] for r in rounds),
                   "ms_per_step_rounds": [r["ms_per_step"] for r in rounds],
                   "warm_up_seconds": statistics.median(r["warm_up_seconds"] for r in rounds),
                   "threads": rounds[0]["threads"]} for key, rounds in samples.items()}
  command = " ".join(["python -m benchmarks.vogn_speed"] + sys.argv[1:])
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), {
      "results": results, "command": command, "git_commit": git_commit(),
      "machine": machine_description()})
  lines = [f"# VOGN's step against VI's, batch {BATCH}", "", f"Command: `{command}` (median of "
           f"{options.rounds} interleaved rounds, each measurement in its own process)", "",
           "| network | trainer | threads | ms per step | × VI | warm-up (s) |",
           "|---|---|---|---|---|---|"]
  for key, row in results.items():
    network, trainer = key.split("/")
    ratio = row["ms_per_step"] / results[f"{network}/vi"]["ms_per_step"]
    lines.append(f"| {network} | {trainer} | {row['threads']} | {row['ms_per_step']:.2f} | "
                 f"{ratio:.2f} | {row['warm_up_seconds']:.1f} |")
  text = "\n".join(lines) + "\n"
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("only", None, "Measure one <network>/<trainer> in this process (JSON).")
  flags.DEFINE_integer("uci_steps", 3000, "Timed steps on the UCI network.")
  flags.DEFINE_integer("lenet5_steps", 30, "Timed steps on LeNet-5.")
  flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median is reported.")
  cli.run(main)
