"""How far our training loops are from TensorFlow's floor: three UCI workloads and the bandit's.

  python -m benchmarks.step_floor --output_dir=results/benchmarks/step_floor [--steps=10000]
      [--workloads=vi,mnf,ensemble,bandit] [--variants=ours,...] [--threads=default,1]

Workloads, each with Adam 1e-3 from the same initial values for every variant;
the first three on 455 synthetic examples with 13 inputs, batch 256, a 50-unit
ReLU hidden layer:
  vi        mean-field VI (local reparameterisation, fixed N(0, 1) prior,
            Gaussian likelihood of scale 0.5);
  mnf       multiplicative normalizing flows (2 + 2 flow steps per layer,
            the same likelihood);
  ensemble  10 heteroscedastic members, each on its own batches, trained on
            the clean and the fast-gradient-sign adversarial likelihood;
  bandit    the mushroom bandit's vi_ts update (`bandits.agents`, built by
            the bandit's own code): 5 seeds on the member axis, each with its
            own history of 1,000 synthetic one-hot contexts (117 features),
            actions and rewards in a 5,000-row store, its own batches of 64,
            the 117-100-100-2 mean-field network, Gaussian likelihood of fixed
            scale 1, KL over the number of observations.
Variants:
  ours                  our library's loop (`TrainingLoop` and the trainers'
                        layers), noise drawn inside each step;
  ours_chunked          the same with --noise_chunk_steps=100: indices and noise
                        drawn ahead for 100 steps at a time;
  ours_xla              the same with --noise_chunk_steps=100 --jit_compile;
  plain_tf2             the step written out by hand in a few dozen ops
                        (`benchmarks.plain_tf2_loops`), one compiled while-loop,
                        indices and normals drawn inside each step;
  plain_noise_outside   the same with the indices and the noise drawn outside
                        the step for 100 steps at a time, the noise as uniforms
                        (Box-Muller in the step);
  xla_noise_outside     the same, the 100-step chunk compiled by XLA and given
                        normals (Box-Muller outside it: XLA's random numbers and
                        transcendentals are slow on this CPU).
The floor of a workload is its fastest variant. Each measurement runs in its
own process (rounds alternate between them, so a busy machine slows all
alike), with TensorFlow's default threads and with one intra-op thread
(`--threads`). Reported: ms per step excluding the traced warm-up (its seconds
separately), the process's CPU ms per step (all its threads; less sensitive to
other processes than the wall time), and the mean objective over the last
1,000 steps, which shows that every variant solves the same problem. Run it on
a quiet machine: other processes inflate every number.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np
from absl import flags

from benchmarks import fresh_process
# benchmarks.plain_tf2_loops (TensorFlow) loads when a measurement starts: a bad flag is refused
# at once, not after TensorFlow's seconds of start-up.
from benchmarks.step_floor_sizes import BANDIT_BATCH, BATCH, CHUNK, LEARNING_RATE
from runner import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

WORKLOADS = ("vi", "mnf", "ensemble", "bandit")
VARIANTS = ("ours", "ours_chunked", "ours_xla", "plain_tf2", "plain_noise_outside",
            "xla_noise_outside")
THREADS = ("default", "1")
NUM_EXAMPLES, INPUTS, HIDDEN, NOISE_SCALE = 455, 13, 50, 0.5
ENSEMBLE_MEMBERS, ADVERSARIAL_EPSILON = 10, 0.01
WARM_UP_STEPS = 200
# The bandit workload: seeds on the member axis, filled rows of each member's history, the rows
# its store holds (the paper's horizon), the fixed reward noise scale.
BANDIT_SEEDS, BANDIT_ROWS, BANDIT_CAPACITY, BANDIT_NOISE_SCALE = (0, 1, 2, 3, 4), 1000, 5000, 1.0


def _data(seed: int):
  rng = np.random.default_rng(seed)
  inputs = rng.normal(size=[NUM_EXAMPLES, INPUTS]).astype(np.float32)
  labels = (np.tanh(inputs @ rng.normal(size=[INPUTS, 1])) +
            0.3 * rng.normal(size=[NUM_EXAMPLES, 1])).astype(np.float32)
  return inputs, labels


def _bandit_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Each seed's history: inputs [seeds, rows, F + 1] (a one-hot value of each of the mushrooms'
  22 attributes, then the action 0/1) and rewards [seeds, rows, 1] by the mushroom rule (pass 0;
  eat 5, or for a poisonous mushroom -35 with probability 1/2), edibility a fixed function of the
  context."""
  from bandits import mushroom
  rng = np.random.default_rng(seed)
  shape = [len(BANDIT_SEEDS), BANDIT_ROWS]
  contexts = np.concatenate([np.eye(len(values), dtype=np.float32)[rng.integers(0, len(values),
                                                                                shape)]
                             for values in mushroom.ATTRIBUTE_VALUES], axis=-1)
  edible = contexts @ rng.normal(size=mushroom.NUM_FEATURES) > 0
  actions = rng.integers(0, mushroom.NUM_ACTIONS, shape)
  rewards = mushroom.rewards(edible, rng.random(shape) < mushroom.PROBABILITY_UNLUCKY, actions)
  inputs = np.concatenate([contexts, actions[..., np.newaxis].astype(np.float32)], axis=-1)
  return inputs, rewards[..., np.newaxis].astype(np.float32)


def workload_data(workload: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """The workload's inputs and labels: the UCI-like examples, or the bandit's histories."""
  return _bandit_data(seed) if workload == "bandit" else _data(seed)


def batch_of(workload: str, inputs, labels, indices) -> tuple["tf.Tensor", "tf.Tensor"]:
  """The examples `indices` pick ([B] of shared data, [M, B] of each member's own history)."""
  import tensorflow as tf
  batch_dims = 1 if workload == "bandit" else 0
  return (tf.gather(inputs, indices, batch_dims=batch_dims),
          tf.gather(labels, indices, batch_dims=batch_dims))


def _gaussian_log_likelihood(labels, outputs):
  import tensorflow as tf
  return (-0.5 * np.log(2 * np.pi * NOISE_SCALE**2)
          - 0.5 * tf.square((labels[..., 0] - outputs[..., 0]) / NOISE_SCALE))


def _ours(workload: str, inputs, labels, seed: int, chunked: bool = False, xla: bool = False):
  """Our library's loop for `workload` (a `plain_tf2_loops.Loop`), its model and `TrainingLoop`;
  `chunked`: its noise drawn ahead in 100-step chunks; `xla`: each chunk compiled by XLA too
  (`--jit_compile`)."""
  import tensorflow as tf
  import tf_keras
  from auxiliary_sampling.adam import Adam
  from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
  from auxiliary_sampling.layers import DenseReparameterization
  from auxiliary_sampling.loop_settings import LoopSettings
  from auxiliary_sampling.training_batches import UniformBatches
  from auxiliary_sampling.training_loop import TrainingLoop
  from methods.trainers import deep_ensemble
  from methods.trainers import mnf
  from methods.trainers.gaussian_head import gaussian_head_log_likelihood
  from benchmarks import plain_tf2_loops
  from common.seeding import seed_everything
  # NumPy too: the layers' noise streams take their seeds from it.
  seed_everything(seed)
  settings = LoopSettings(jit_compile=xla, noise_chunk_steps=CHUNK if chunked or xla else 0)
  if workload == "bandit":
    model, loop = _bandit_update(inputs, labels, seed, settings)
  elif workload == "vi":
    model = tf_keras.Sequential([
        DenseReparameterization(HIDDEN, activation="relu", trainable_prior_scale=False),
        DenseReparameterization(1, trainable_prior_scale=False)])
    model(inputs[:1])
    loop = TrainingLoop(ElboObjective(model, _gaussian_log_likelihood),
                        GradientUpdate(Adam(model.trainable_variables)),
                        UniformBatches(inputs, labels, BATCH), data_seed=seed,
                        loop_settings=settings)
  elif workload == "mnf":
    model = mnf.regression_mnf(HIDDEN, seed=seed)
    model(inputs[:1])
    loop = TrainingLoop(ElboObjective(model, _gaussian_log_likelihood,
                                      kl_fn=lambda: mnf.mnf_kl(model)),
                        GradientUpdate(Adam(model.trainable_variables)),
                        UniformBatches(inputs, labels, BATCH), data_seed=seed,
                        loop_settings=settings)
  else:
    model = deep_ensemble.regression_ensemble(ENSEMBLE_MEMBERS, HIDDEN, seed=seed)
    model(inputs[:1])
    no_kl = tf.zeros([ENSEMBLE_MEMBERS])
    loop = TrainingLoop(deep_ensemble.AdversarialObjective(
        model, gaussian_head_log_likelihood, lambda: no_kl, ADVERSARIAL_EPSILON),
                        GradientUpdate(Adam(model.trainable_variables)),
                        UniformBatches(inputs, labels, BATCH, members=ENSEMBLE_MEMBERS),
                        data_seed=seed, loop_settings=settings)

  def run(num_steps):
    return loop.run(tf.constant(num_steps), tf.constant(LEARNING_RATE), tf.constant(0.0))[0]

  return plain_tf2_loops.Loop(run, loop.tracing_count), model, loop


def _bandit_update(inputs, labels, seed: int, settings) -> tuple:
  """(reward model, training loop) of a vi_ts agent built by the bandit's code under `settings`,
  its histories holding `inputs` and `labels`: the loop is what every bandit step runs."""
  from bandits import mushroom
  from bandits.agents import make_agent
  from bandits.config import BanditConfig
  config = BanditConfig(agents=("vi_ts",), seeds=BANDIT_SEEDS, horizon=BANDIT_CAPACITY,
                        batch_size=BANDIT_BATCH, learning_rate=LEARNING_RATE,
                        noise_scale=str(BANDIT_NOISE_SCALE), jit_compile=settings.jit_compile,
                        noise_chunk_steps=settings.noise_chunk_steps)
  config.validate()
  agent = make_agent("vi_ts", config, mushroom.NUM_FEATURES, run_seed=seed)
  rows = inputs.shape[1]
  agent.history.inputs[:, :rows].assign(inputs)
  agent.history.rewards[:, :rows].assign(labels)
  agent.history.count.assign(rows)
  return agent.model, agent.loop


def rewritten(workload: str, model, inputs, labels) -> plain_tf2_loops.Workload:
  """The workload's plain-TF2 rewrite, starting from the current values of our `model`."""
  from benchmarks import plain_tf2_loops
  if workload == "vi":
    return plain_tf2_loops.vi_workload(model, inputs, labels, _gaussian_log_likelihood)
  if workload == "mnf":
    return plain_tf2_loops.mnf_workload(model, inputs, labels, _gaussian_log_likelihood)
  if workload == "bandit":
    return plain_tf2_loops.bandit_workload(model, inputs, labels)
  return plain_tf2_loops.ensemble_workload(model, inputs, labels, ADVERSARIAL_EPSILON)


def _hand_written(workload: str, inputs, labels, seed: int, noise_outside: bool, xla: bool):
  """The workload's plain-TF2 loop, from the initial values of our model."""
  from benchmarks import plain_tf2_loops
  _, model, _ = _ours(workload, inputs, labels, seed)
  return plain_tf2_loops.compiled_loop(rewritten(workload, model, inputs, labels), seed,
                                       noise_outside, xla)


def measure(workload: str, variant: str, steps: int, seed: int) -> dict:
  """ms per step of `variant` of `workload` after a traced warm-up, the warm-up's seconds, and
  the final objective (ELBO or bound, the ensemble's per-member objective: member means)."""
  inputs, labels = workload_data(workload, seed)
  if variant.startswith("ours"):
    loop, _, _ = _ours(workload, inputs, labels, seed, chunked=variant == "ours_chunked",
                    xla=variant == "ours_xla")
  else:
    loop = _hand_written(workload, inputs, labels, seed, noise_outside=variant != "plain_tf2",
                         xla=variant == "xla_noise_outside")
  started = time.perf_counter()
  loop.run(WARM_UP_STEPS)
  warm_up = time.perf_counter() - started
  traces_before = loop.tracing_count()
  started, cpu_started = time.perf_counter(), time.process_time()
  trace = np.asarray(loop.run(steps)).reshape(steps, -1)
  seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
  return {"ms_per_step": 1e3 * seconds / steps, "cpu_ms_per_step": 1e3 * cpu_seconds / steps,
          "warm_up_seconds": warm_up,
          "traces_while_timed": loop.tracing_count() - traces_before,
          "final_objective": float(np.mean(trace[-min(1000, steps):]))}


def _names(flag: str, value: str, allowed: tuple[str, ...]) -> list[str]:
  """The distinct names of a comma-separated flag, each one of `allowed`; else a usage error."""
  names = [name for name in value.split(",") if name]
  unknown = [name for name in names if name not in allowed]
  cli.require(names and not unknown and len(set(names)) == len(names),
              f"--{flag}={value!r} is not allowed; allowed: distinct names among "
              f"{', '.join(allowed)}")
  return names


def main(argv):
  del argv
  options = flags.FLAGS
  cli.require(options.steps >= CHUNK and options.steps % CHUNK == 0,
              f"--steps={options.steps} must be a positive multiple of {CHUNK}")
  cli.require(options.rounds >= 1, f"--rounds={options.rounds} must be >= 1")
  if options.only:
    allowed = [f"{w}/{v}" for w in WORKLOADS for v in VARIANTS]
    cli.require(options.only in allowed,
                f"--only={options.only!r} is not allowed; allowed: {', '.join(allowed)}")
    workload, variant = options.only.split("/")
    print(json.dumps(measure(workload, variant, options.steps, options.seed)))
    return
  workloads = _names("workloads", options.workloads, WORKLOADS)
  variants = _names("variants", options.variants, VARIANTS)
  threads_settings = _names("threads", options.threads, THREADS)
  cli.require(bool(options.output_dir), "--output_dir is required")

  def measure_one(key):
    workload, variant, threads = key
    return fresh_process.measure(
        "benchmarks.step_floor",
        [f"--only={workload}/{variant}", f"--steps={options.steps}", f"--seed={options.seed}"],
        {"TF_NUM_INTRAOP_THREADS": None if threads == "default" else threads})

  rounds = fresh_process.interleaved_rounds(
      [(workload, variant, threads) for workload in workloads for threads in threads_settings
       for variant in variants], options.rounds, measure_one)
  command = " ".join(["python -m benchmarks.step_floor"] + sys.argv[1:])
  results = {f"{workload}/{variant}/threads_{threads}": {
      "ms_per_step": statistics.median(r["ms_per_step"] for r in values),
      "ms_per_step_rounds": [r["ms_per_step"] for r in values],
      "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in values),
      "warm_up_seconds": statistics.median(r["warm_up_seconds"] for r in values),
      "traces_while_timed": sum(r["traces_while_timed"] for r in values),
      "final_objective": values[0]["final_objective"]}
      for (workload, variant, threads), values in rounds.items()}
  retraced = [name for name, row in results.items() if row["traces_while_timed"]]
  if retraced:
    raise RuntimeError(f"{', '.join(retraced)} traced while timed: their times include tracing; "
                       "nothing written")
  payload = {"results": results, "steps": options.steps, "rounds": options.rounds,
             "command": command, "git_commit": git_commit(), "machine": machine_description()}
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), payload)
  text = _table(results, command, options.steps, options.rounds)
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


def _table(results: dict, command: str, steps: int, rounds: int) -> str:
  """speed.md: every workload's variants against its floor (its fastest variant)."""
  lines = [f"# Our training loops against TensorFlow's floor: UCI 13-50 network, batch {BATCH};"
           f" bandit {len(BANDIT_SEEDS)} x 117-100-100-2, batch {BANDIT_BATCH}",
           "", f"Command: `{command}` ({steps:,} timed steps, median of {rounds} alternating "
           "rounds)", "",
           "| workload | variant | threads | ms per step | × floor | CPU ms per step | "
           "warm-up (s) | final objective |", "|---|---|---|---|---|---|---|---|"]
  for workload in dict.fromkeys(name.split("/")[0] for name in results):
    rows = {name: row for name, row in results.items() if name.startswith(workload + "/")}
    floor = min(row["ms_per_step"] for row in rows.values())
    for name, row in rows.items():
      _, variant, threads = name.split("/")
      lines.append(f"| {workload} | {variant} | {threads.removeprefix('threads_')} | "
                   f"{row['ms_per_step']:.3f} | {row['ms_per_step'] / floor:.2f} | "
                   f"{row['cpu_ms_per_step']:.3f} | {row['warm_up_seconds']:.1f} | "
                   f"{row['final_objective']:,.1f} |")
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("only", None,
                      "Measure one workload/variant in this process and print JSON.")
  flags.DEFINE_string("workloads", ",".join(WORKLOADS),
                      f"Comma-separated workloads to measure, among {', '.join(WORKLOADS)}.")
  flags.DEFINE_string("variants", ",".join(VARIANTS),
                      f"Comma-separated variants to measure, among {', '.join(VARIANTS)}.")
  flags.DEFINE_string("threads", ",".join(THREADS),
                      "Comma-separated intra-op thread settings to measure each variant with: "
                      "default (TensorFlow's) and 1.")
  flags.DEFINE_integer("steps", 10_000, "Timed steps per measurement (a multiple of 100).")
  flags.DEFINE_integer("rounds", 3, "Alternating rounds; the median is reported.")
  flags.DEFINE_integer("seed", 0, "Seed of the data, the initialisation and the noise.")
  cli.run(main)
