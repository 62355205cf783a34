"""How far our VI step is from TensorFlow's floor on the UCI network: the same workload, four ways.

  python -m benchmarks.step_floor --output_dir=results/benchmarks/step_floor [--steps=30000]

Workload: mean-field VI of a 13-50-1 ReLU network (local reparameterisation,
fixed N(0, 1) prior, Gaussian likelihood of scale 0.5) on 455 synthetic
examples, batch 256, Adam 1e-3, from the same initial posterior:
  ours                  `ElboMaximizer` over `DenseReparameterization` layers;
  ours_xla              the same with --noise_chunk_steps=100 --jit_compile;
  plain_tf2             the step written out by hand in a few dozen ops, one
                        compiled while-loop, normals drawn inside each step;
  plain_noise_outside   the same with the batch indices and the noise drawn
                        outside the step for 100 steps at a time, the noise as
                        uniforms (Box-Muller in the step);
  xla_noise_outside     the same, the 100-step chunk compiled by XLA and given
                        normals (Box-Muller outside it: XLA's random numbers and
                        transcendentals are slow on this CPU).
Each runs in its own process (rounds alternate between the variants, so a
busy machine slows all alike), once with TensorFlow's default threads and
once with one intra-op thread. Reported: ms per step excluding the traced
warm-up (compile time separately), and the mean ELBO over the last 1,000
steps, which shows that every variant solves the same problem. Run it on a
quiet machine: other processes inflate every number.
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
from common import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

VARIANTS = ("ours", "ours_xla", "plain_tf2", "plain_noise_outside", "xla_noise_outside")
THREADS = ("default", "1")
NUM_EXAMPLES, INPUTS, HIDDEN, BATCH, NOISE_SCALE, LEARNING_RATE = 455, 13, 50, 256, 0.5, 1e-3
CHUNK = 100
WARM_UP_STEPS = 200


def _data(seed: int):
  rng = np.random.default_rng(seed)
  inputs = rng.normal(size=[NUM_EXAMPLES, INPUTS]).astype(np.float32)
  labels = (np.tanh(inputs @ rng.normal(size=[INPUTS, 1])) +
            0.3 * rng.normal(size=[NUM_EXAMPLES, 1])).astype(np.float32)
  return inputs, labels


def _gaussian_log_likelihood(labels, outputs):
  import tensorflow as tf
  return (-0.5 * np.log(2 * np.pi * NOISE_SCALE**2)
          - 0.5 * tf.square((labels[..., 0] - outputs[..., 0]) / NOISE_SCALE))


def _ours(inputs, labels, seed: int, xla: bool = False):
  """`run(num_steps) -> ELBO trace` of our library's VI loop, and its model; `xla`: its noise
  drawn ahead in 100-step chunks, each chunk compiled by XLA (`--jit_compile`)."""
  import tensorflow as tf
  import tf_keras
  from auxiliary_sampling.elbo_maximizer import ElboMaximizer
  from auxiliary_sampling.layers import DenseReparameterization
  from auxiliary_sampling.loop_settings import LoopSettings
  from common.seeding import seed_everything
  # NumPy too: the layers' noise streams take their seeds from it.
  seed_everything(seed)
  model = tf_keras.Sequential([
      DenseReparameterization(HIDDEN, activation="relu", trainable_prior_scale=False),
      DenseReparameterization(1, trainable_prior_scale=False)])
  model(inputs[:1])
  settings = LoopSettings(jit_compile=xla, noise_chunk_steps=CHUNK if xla else 0)
  maximizer = ElboMaximizer(model, inputs, labels, _gaussian_log_likelihood,
                            model.trainable_variables, BATCH, data_seed=seed,
                            loop_settings=settings)

  def run(num_steps):
    return maximizer.run(tf.constant(num_steps), tf.constant(LEARNING_RATE), tf.constant(0.0))[0]
  return run, model


def _hand_written(inputs, labels, seed: int, noise_outside: bool, xla: bool):
  """The same VI step in a few ops: Gaussian KL to N(0, 1), local reparameterisation, Adam."""
  import tensorflow as tf
  run_ours, model = _ours(inputs, labels, seed)   # the same initial posterior
  del run_ours
  layers = [(layer.kernel, layer.bias) for layer in model.layers]
  locs = [tf.Variable(p.posterior_loc) for pair in layers for p in pair]
  raws = [tf.Variable(tf.math.log(tf.math.expm1(p.posterior_scale))) for pair in layers
          for p in pair]
  variables = locs + raws
  moments = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in variables]
  iterations = tf.Variable(0.0)
  inputs, labels = tf.constant(inputs), tf.constant(labels)
  noise_sizes = [BATCH * HIDDEN, BATCH]

  def stream(number, counter):
    """The stateless seed of random stream `number` at `counter`."""
    return tf.stack([tf.constant(seed + number, tf.int64), counter])

  def box_muller(uniforms):
    first, second = tf.split(uniforms, 2, axis=-1)
    radius = tf.sqrt(-2.0 * tf.math.log1p(-first))
    angle = 2.0 * np.pi * second
    return tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], -1)

  def step(indices, noises):
    batch_inputs, batch_labels = tf.gather(inputs, indices), tf.gather(labels, indices)
    with tf.GradientTape() as tape:
      scales = [tf.nn.softplus(raw) for raw in raws]
      hidden = batch_inputs
      for layer, noise in enumerate(noises):
        kernel, bias, kernel_scale, bias_scale = (locs[2 * layer], locs[2 * layer + 1],
                                                  scales[2 * layer], scales[2 * layer + 1])
        mean = hidden @ kernel + bias
        variance = tf.square(hidden) @ tf.square(kernel_scale) + tf.square(bias_scale)
        hidden = mean + tf.sqrt(variance) * tf.reshape(noise, tf.shape(mean))
        if layer == 0:
          hidden = tf.nn.relu(hidden)
      log_likelihood = _gaussian_log_likelihood(batch_labels, hidden)
      kl = tf.add_n([tf.reduce_sum(0.5 * (tf.square(s) + tf.square(m)) - tf.math.log(s) - 0.5)
                     for s, m in zip(scales, locs)])
      elbo = NUM_EXAMPLES * tf.reduce_mean(log_likelihood) - kl
      loss = -elbo / NUM_EXAMPLES
    gradients = tape.gradient(loss, variables)
    iterations.assign_add(1.0)
    correction = tf.sqrt(1.0 - 0.999**iterations) / (1.0 - 0.9**iterations)
    for variable, gradient, (first, second) in zip(variables, gradients, moments):
      first.assign(0.9 * first + 0.1 * gradient)
      second.assign(0.999 * second + 0.001 * tf.square(gradient))
      variable.assign_sub(LEARNING_RATE * correction * first / (tf.sqrt(second) + 1e-7))
    return elbo

  def chunk(counter, chunk_indices, uniforms):
    trace = tf.TensorArray(tf.float32, size=CHUNK)
    for offset in tf.range(CHUNK):
      index = counter + tf.cast(offset, tf.int64)
      if noise_outside:
        indices = chunk_indices[offset]
        parts = tf.split(uniforms[offset], noise_sizes)
        # Under XLA the chunk gets normals: its own transcendentals are slow on this CPU.
        noises = parts if xla else [box_muller(part) for part in parts]
      else:
        indices = tf.random.stateless_uniform([BATCH], seed=stream(0, index),
                                              maxval=NUM_EXAMPLES, dtype=tf.int32)
        noises = [tf.random.stateless_normal([size], seed=stream(1 + i, index))
                  for i, size in enumerate(noise_sizes)]
      trace = trace.write(offset, step(indices, noises))
    return trace.stack()

  compiled_chunk = tf.function(chunk, jit_compile=xla)

  @tf.function
  def run(num_steps):
    chunks = tf.TensorArray(tf.float32, size=num_steps // CHUNK)
    for number in tf.range(num_steps // CHUNK):
      counter = tf.cast(number, tf.int64) * CHUNK
      chunk_indices, uniforms = tf.zeros([CHUNK, BATCH], tf.int32), tf.zeros([CHUNK, 1])
      if noise_outside:
        # XLA's own random ops are slow on CPU: every random number is drawn out here.
        chunk_indices = tf.random.stateless_uniform([CHUNK, BATCH], seed=stream(0, counter),
                                                    maxval=NUM_EXAMPLES, dtype=tf.int32)
        uniforms = tf.random.stateless_uniform([CHUNK, sum(noise_sizes)], seed=stream(3, counter))
        if xla:
          uniforms = tf.concat([box_muller(part) for part in tf.split(uniforms, noise_sizes, 1)],
                               1)
      chunks = chunks.write(number, compiled_chunk(counter, chunk_indices, uniforms))
    return chunks.concat()
  return run


def measure(variant: str, steps: int, seed: int) -> dict:
  """ms per step of `variant` after a traced warm-up, the warm-up's seconds, the final ELBO."""
  inputs, labels = _data(seed)
  if variant.startswith("ours"):
    run, _ = _ours(inputs, labels, seed, xla=variant == "ours_xla")
  else:
    run = _hand_written(inputs, labels, seed, noise_outside=variant != "plain_tf2",
                        xla=variant == "xla_noise_outside")
  started = time.perf_counter()
  run(WARM_UP_STEPS)
  warm_up = time.perf_counter() - started
  started = time.perf_counter()
  trace = np.asarray(run(steps)).reshape(steps, -1)
  seconds = time.perf_counter() - started
  return {"ms_per_step": 1e3 * seconds / steps, "warm_up_seconds": warm_up,
          "final_elbo": float(np.mean(trace[-min(1000, steps):]))}


def main(argv):
  del argv
  options = flags.FLAGS
  cli.require(options.steps >= CHUNK and options.steps % CHUNK == 0,
              f"--steps={options.steps} must be a positive multiple of {CHUNK}")
  cli.require(options.rounds >= 1, f"--rounds={options.rounds} must be >= 1")
  if options.only:
    cli.require(options.only in VARIANTS,
                f"--only={options.only!r} is not allowed; allowed: {', '.join(VARIANTS)}")
    print(json.dumps(measure(options.only, options.steps, options.seed)))
    return
  cli.require(bool(options.output_dir), "--output_dir is required")
  def measure_one(key):
    variant, threads = key
    return fresh_process.measure(
        "benchmarks.step_floor",
        [f"--only={variant}", f"--steps={options.steps}", f"--seed={options.seed}"],
        {"TF_NUM_INTRAOP_THREADS": None if threads == "default" else threads})

  rounds = fresh_process.interleaved_rounds(
      [(variant, threads) for threads in THREADS for variant in VARIANTS], options.rounds,
      measure_one)
  command = " ".join(["python -m benchmarks.step_floor"] + sys.argv[1:])
  results = {f"{variant}/threads_{threads}": {
      "ms_per_step": statistics.median(r["ms_per_step"] for r in values),
      "ms_per_step_rounds": [r["ms_per_step"] for r in values],
      "warm_up_seconds": statistics.median(r["warm_up_seconds"] for r in values),
      "final_elbo": values[0]["final_elbo"]} for (variant, threads), values in rounds.items()}
  fastest = min(row["ms_per_step"] for row in results.values())
  payload = {"results": results, "steps": options.steps, "rounds": options.rounds,
             "command": command, "git_commit": git_commit(), "machine": machine_description()}
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), payload)
  lines = [f"# The VI step against TensorFlow's floor: UCI 13-50-1 network, batch {BATCH}", "",
           f"Command: `{command}` ({options.steps:,} timed steps, median of {options.rounds} "
           "alternating rounds)", "",
           "| variant | threads | ms per step | × fastest | warm-up (s) | final ELBO |",
           "|---|---|---|---|---|---|"]
  for name, row in results.items():
    variant, threads = name.split("/threads_")
    lines.append(f"| {variant} | {threads} | {row['ms_per_step']:.3f} | "
                 f"{row['ms_per_step'] / fastest:.2f} | {row['warm_up_seconds']:.1f} | "
                 f"{row['final_elbo']:,.1f} |")
  text = "\n".join(lines) + "\n"
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("only", None, "Measure one variant in this process and print JSON.")
  flags.DEFINE_integer("steps", 30_000, "Timed VI steps per measurement (a multiple of 100).")
  flags.DEFINE_integer("rounds", 3, "Alternating rounds; the median is reported.")
  flags.DEFINE_integer("seed", 0, "Seed of the data, the initialisation and the noise.")
  cli.run(main)
