"""VI step time of the default single-device path against a baseline commit, and Mirrored overhead.

  python -m benchmarks.distribution_speed --baseline_ref=5fee59e \\
      --output_dir=results/benchmarks/distribution_speed

Side by side in one run, rounds interleaved so that machine load hits every
variant alike: the UCI network (13 inputs, 50 ReLU units, batch 256 of 455
examples; op-bound, so per-step overhead shows most) trained by
the training loop for `--steps` steps after a warm-up, in a fresh process per
measurement (with the number of ops in the compiled loop's graph: the
default path should have exactly the baseline's):
  baseline        the code at `--baseline_ref` (checked out in a temporary
                  git worktree), default path;
  default         this tree, default path (no strategy);
  mirrored_2cpu   this tree, MirroredStrategy over 2 logical CPU devices
                  (REFINED_VI_TEST_CPU_DEVICES=2): the cost of the
                  data-parallel machinery where it cannot pay off (both
                  replicas share the same 2 cores).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import flags

from runner import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside the tree being measured: the training loop's API, or a baseline commit's older
# `ElboMaximizer`.
_TIMING_SCRIPT = r"""
import json, os, sys, time
import numpy as np
import tensorflow as tf
import tf_keras
devices = int(os.environ.get("REFINED_VI_TEST_CPU_DEVICES", "0") or 0)
if devices:
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)])
from auxiliary_sampling.layers import DenseReparameterization
steps, warmup = int(sys.argv[1]), int(sys.argv[2])
strategy = (tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
            if devices else tf.distribute.get_strategy())
rng = np.random.default_rng(0)
x = rng.normal(size=(455, 13)).astype(np.float32)
y = (x @ rng.normal(size=13)).astype(np.float32)[:, None]
def log_likelihood(labels, outputs):
  return -0.5 * tf.reduce_sum(tf.square(labels - outputs), -1)
with strategy.scope():
  model = tf_keras.Sequential([DenseReparameterization(50, activation="relu"),
                               DenseReparameterization(1)])
  model(x[:1])
  try:
    from auxiliary_sampling.adam import Adam
    from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
    from auxiliary_sampling.training_batches import UniformBatches
    from auxiliary_sampling.training_loop import TrainingLoop
    maximizer = TrainingLoop(ElboObjective(model, log_likelihood),
                             GradientUpdate(Adam(model.trainable_variables)),
                             UniformBatches(x, y, 256), data_seed=0)
  except ImportError:
    from auxiliary_sampling.elbo_maximizer import ElboMaximizer
    maximizer = ElboMaximizer(model, x, y, log_likelihood, model.trainable_variables,
                              batch_size=256, data_seed=0)
maximizer.maximize(warmup, 1e-3)
graph = maximizer.run.get_concrete_function(
    tf.constant(1), tf.constant(1e-3), tf.constant(0.0)).graph.as_graph_def()
step_ops = sum(len(function.node_def) for function in graph.library.function)
started = time.perf_counter()
maximizer.maximize(steps, 1e-3)
print(json.dumps({"seconds_per_step": (time.perf_counter() - started) / steps,
                  "replicas": strategy.num_replicas_in_sync, "step_ops": step_ops}))
"""

VARIANTS = ("baseline", "default", "mirrored_2cpu")


def _measure(tree: str, steps: int, warmup: int, cpu_devices: int) -> dict:
  environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1",
                 "PYTHONPATH": tree}
  environment.pop("REFINED_VI_TEST_CPU_DEVICES", None)
  if cpu_devices:
    environment["REFINED_VI_TEST_CPU_DEVICES"] = str(cpu_devices)
  completed = subprocess.run([sys.executable, "-c", _TIMING_SCRIPT, str(steps), str(warmup)],
                             cwd=tree, env=environment, capture_output=True, text=True, check=False)
  if completed.returncode != 0:
    raise RuntimeError(f"timing in {tree} failed: {completed.stderr.strip().splitlines()[-1]}")
  return json.loads(completed.stdout.strip().splitlines()[-1])


def run_all(baseline_tree: str, steps: int, warmup: int, rounds: int) -> dict:
  """Median seconds per step of every variant over `rounds` interleaved rounds."""
  setups = {"baseline": (baseline_tree, 0), "default": (REPO, 0), "mirrored_2cpu": (REPO, 2)}
  samples = {name: [] for name in VARIANTS}
  step_ops = {}
  for _ in range(rounds):
    for name in VARIANTS:
      tree, cpu_devices = setups[name]
      measured = _measure(tree, steps, warmup, cpu_devices)
      samples[name].append(measured["seconds_per_step"])
      step_ops[name] = measured["step_ops"]
  results = {name: {"seconds_per_step": statistics.median(values), "rounds": values,
                    "step_ops": step_ops[name]} for name, values in samples.items()}
  baseline = results["baseline"]["seconds_per_step"]
  results["default_vs_baseline"] = results["default"]["seconds_per_step"] / baseline
  results["mirrored_2cpu_vs_default"] = (results["mirrored_2cpu"]["seconds_per_step"] /
                                         results["default"]["seconds_per_step"])
  return results


def _markdown(results: dict, command: str, baseline_ref: str) -> str:
  lines = ["# Default path and MirroredStrategy: VI step time, UCI network, batch 256", "",
           f"Command: `{command}` (baseline: `{baseline_ref}`)", "",
           "| variant | ms per step (median) | rounds (ms) | ops in the compiled loop |",
           "|---|---|---|---|"]
  for name in VARIANTS:
    rounds = ", ".join(f"{1000 * value:.3f}" for value in results[name]["rounds"])
    lines.append(f"| {name} | {1000 * results[name]['seconds_per_step']:.3f} | {rounds} | "
                 f"{results[name]['step_ops']} |")
  lines += ["", f"- default / baseline: {results['default_vs_baseline']:.3f}",
            f"- mirrored on 2 logical CPUs / default: {results['mirrored_2cpu_vs_default']:.2f}",
            ""]
  return "\n".join(lines)


def main(argv):
  del argv
  options = flags.FLAGS
  cli.require(bool(options.output_dir), "--output_dir is required")
  cli.require(options.steps >= 1 and options.rounds >= 1 and options.warmup >= 1,
              f"--steps={options.steps}, --warmup={options.warmup} and --rounds={options.rounds} "
              "must be >= 1")
  with tempfile.TemporaryDirectory() as parent:
    baseline_tree = os.path.join(parent, "baseline")
    checkout = subprocess.run(["git", "worktree", "add", "--detach", baseline_tree,
                               options.baseline_ref], cwd=REPO, capture_output=True, text=True)
    if checkout.returncode != 0:
      raise cli.UsageError(f"--baseline_ref={options.baseline_ref} cannot be checked out: "
                           f"{checkout.stderr.strip().splitlines()[-1]}")
    try:
      results = run_all(baseline_tree, options.steps, options.warmup, options.rounds)
    finally:
      subprocess.run(["git", "worktree", "remove", "--force", baseline_tree], cwd=REPO,
                     capture_output=True)
  command = " ".join(["python -m benchmarks.distribution_speed"] + sys.argv[1:])
  results.update(command=command, baseline_ref=options.baseline_ref, git_commit=git_commit(),
                 machine=machine_description())
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), results)
  text = _markdown(results, command, options.baseline_ref)
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("baseline_ref", "HEAD", "Git commit whose default path is the baseline.")
  flags.DEFINE_integer("steps", 3000, "Timed steps per measurement.")
  flags.DEFINE_integer("warmup", 300, "Untimed steps first (tracing, caches).")
  flags.DEFINE_integer("rounds", 5, "Interleaved rounds; the median is reported.")
  cli.run(main)
