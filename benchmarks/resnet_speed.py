"""ResNet-20 step times and FLOPs per variant at batch 256, for planning Table 3 runs.

  python -m benchmarks.resnet_speed --output_dir=results/benchmarks/resnet_speed \\
      [--image_shape=32,32,3] [--steps=5] [--rounds=3]

Each measurement runs in its own process (its peak memory is its own): a
warm-up that traces the compiled loop, then `--steps` timed Adam steps on
random images of `--image_shape` (speed does not depend on the pixels):
  vi_<mode>[_bn]       mean-field VI of the hybrid or full model, with or
                       without batch norm (the paper's four Table 3 variants);
  tfp_vi_hybrid_bn     the same hybrid model built from tfp.layers (Flipout,
                       local reparameterisation) in a plain TF2 loop: the
                       reference for our VI step;
  refine_hybrid_bn     one refinement step of M = 10 hybrid members together,
                       posteriors only (the default);
  refine_hybrid_bn_refit  the same, each member's deterministic layers and
                       batch norm refitted too (--refit_deterministic);
  ensemble_bn          one step of 10 deterministic ResNet-20 members, each on
                       its own batch.
The derived numbers project a paper-scale Table 3 run on this machine:
refinement (K * T = 2,000 steps) against VI (200 epochs of CIFAR-10), and the
wall time of every variant, method and seed.
FLOPs are TensorFlow's profiler count of one compiled forward and backward
pass (multiply-adds count 2), so a GPU time can be estimated from a device's
sustained FLOP rate.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time

from absl import flags

from benchmarks import fresh_process
from runner import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

MEASUREMENTS = ("vi_hybrid", "vi_hybrid_bn", "vi_full", "vi_full_bn", "tfp_vi_hybrid_bn",
                "refine_hybrid_bn", "refine_hybrid_bn_refit", "ensemble_bn")
MEMBERS, BATCH = 10, 256
# The paper's Table 3 settings: 200 epochs of CIFAR-10's 50,000 at 256; K = 10, T = 200, M = 10.
VI_STEPS, REFINE_STEPS, EQUAL_COMPUTE_STEPS, SEEDS = 39_063, 10 * 200, 10 * 10 * 200, 3


def _model_and_variables(name: str, images):
  from auxiliary_sampling.trained_state import refinement_variables
  from resnet.networks import ResNet
  batchnorm = name.endswith("_bn")
  if name.startswith("vi_"):
    model = ResNet(name.split("_")[1], batchnorm)
  elif name.startswith("refine_"):
    model = ResNet("hybrid", True, num_members=MEMBERS)
  else:
    model = ResNet("none", True, num_members=MEMBERS)
  model(images[:1])
  if not name.startswith("refine_"):
    return model, model.trainable_variables
  return model, refinement_variables(model, refit_deterministic=name.endswith("_refit"))


def _tfp_resnet20_hybrid_bn(image_shape):
  """ResNet-20 hybrid with batch norm from tfp.layers and Keras layers: the reference model."""
  import tensorflow as tf
  import tensorflow_probability as tfp
  import tf_keras
  from resnet.config import DEPTH, blocks_per_stack
  from resnet.networks import STACK_FILTERS
  layers = tf_keras.layers
  inputs = tf_keras.Input(image_shape)
  outputs = tf.nn.selu(layers.Conv2D(16, 3, padding="same")(inputs))
  for stack, filters in enumerate(STACK_FILTERS):
    for block in range(blocks_per_stack(DEPTH)):
      strides = 2 if stack > 0 and block == 0 else 1
      branch = layers.Conv2D(filters, 3, strides, padding="same")(outputs)
      branch = tf.nn.selu(layers.BatchNormalization()(branch))
      branch = tfp.layers.Convolution2DFlipout(filters, 3, padding="same")(branch)
      branch = layers.BatchNormalization()(branch)
      if strides != 1:
        outputs = layers.Conv2D(filters, 1, strides, padding="same")(outputs)
      outputs = tf.nn.selu(outputs + branch)
  pooled = layers.GlobalAveragePooling2D()(outputs)
  return tf_keras.Model(inputs, tfp.layers.DenseLocalReparameterization(10)(pooled))


def _measure_tfp(image_shape, images, labels, steps: int) -> dict:
  """A plain TF2 loop over the tfp.layers model: minibatch gather, ELBO, Keras Adam, compiled."""
  import tensorflow as tf
  import tf_keras
  model = _tfp_resnet20_hybrid_bn(image_shape)
  optimizer = tf_keras.optimizers.Adam(1e-3)
  images, labels = tf.constant(images), tf.constant(labels)
  num_examples = int(images.shape[0])

  @tf.function
  def train(num_steps):
    for step in tf.range(num_steps):
      indices = tf.random.stateless_uniform([BATCH], seed=[0, step], maxval=num_examples,
                                            dtype=tf.int32)
      with tf.GradientTape() as tape:
        logits = model(tf.gather(images, indices), training=True)
        nll = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.gather(labels, indices), logits))
        loss = nll + tf.add_n(model.losses) / num_examples
      optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))

  flops = _forward_backward_flops(model, model.trainable_variables, images[:BATCH],
                                  labels[:BATCH])
  train(tf.constant(2))
  started = time.perf_counter()
  train(tf.constant(steps))
  return {"seconds_per_step": (time.perf_counter() - started) / steps, "flops_per_step": flops,
          "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _forward_backward_flops(model, variables, images, labels) -> float:
  import tensorflow as tf

  from auxiliary_sampling.predictive import categorical_log_likelihood

  @tf.function
  def step(batch_images, batch_labels):
    with tf.GradientTape() as tape:
      loss = -tf.reduce_sum(categorical_log_likelihood(batch_labels,
                                                       model(batch_images, training=True)))
    return tape.gradient(loss, variables)

  graph = step.get_concrete_function(images, labels).graph
  options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
  options["output"] = "none"
  profile = tf.compat.v1.profiler.profile(graph, options=options)
  return float(profile.total_float_ops)


def measure(name: str, image_shape: tuple[int, ...], steps: int) -> dict:
  """Seconds per step of `name` after a traced warm-up, FLOPs per step and peak memory."""
  import numpy as np
  import tensorflow as tf

  from auxiliary_sampling.adam import Adam
  from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
  from auxiliary_sampling.predictive import categorical_log_likelihood
  from auxiliary_sampling.training_batches import UniformBatches
  from auxiliary_sampling.training_loop import TrainingLoop
  rng = np.random.default_rng(0)
  images = rng.normal(size=(2 * BATCH,) + image_shape).astype(np.float32)
  labels = rng.integers(0, 10, size=2 * BATCH).astype(np.int32)
  if name == "tfp_vi_hybrid_bn":
    return _measure_tfp(image_shape, images, labels, steps)
  model, variables = _model_and_variables(name, images)
  kl_fn, members = None, None
  if name == "ensemble_bn":
    zero = tf.zeros([MEMBERS])
    kl_fn, members = (lambda: zero), MEMBERS
  flops = _forward_backward_flops(
      model, variables,
      tf.constant(images[:BATCH] if name != "ensemble_bn" else
                  np.broadcast_to(images[:BATCH], (MEMBERS, BATCH) + image_shape)),
      tf.constant(labels[:BATCH]))
  loop = TrainingLoop(ElboObjective(model, categorical_log_likelihood, kl_fn=kl_fn),
                      GradientUpdate(Adam(variables)),
                      UniformBatches(images, labels, BATCH, members=members))
  loop.maximize(2, 1e-3)
  started = time.perf_counter()
  loop.maximize(steps, 1e-3)
  return {"seconds_per_step": (time.perf_counter() - started) / steps, "flops_per_step": flops,
          "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def derived(results: dict) -> dict:
  """Refinement against VI at paper settings, and the projected hours of a whole Table 3.

  Variants without batch norm take the time of their batch-norm twins where only those were
  measured (refinement, the ensemble): an upper bound, batch norm adds work.
  """
  seconds = {name: results[name]["seconds_per_step"] for name in MEASUREMENTS}
  refine = REFINE_STEPS * seconds["refine_hybrid_bn"]
  per_variant = {}
  for variant in ("hybrid", "hybrid_bn", "full", "full_bn"):
    vi_step = seconds[f"vi_{variant}"]
    per_variant[variant] = (VI_STEPS + EQUAL_COMPUTE_STEPS) * vi_step + refine
  ensembles = 2 * VI_STEPS * seconds["ensemble_bn"]
  hours = {variant: SEEDS * total / 3600 for variant, total in per_variant.items()}
  hours["ensembles"] = SEEDS * ensembles / 3600
  hours["table3"] = sum(hours.values())
  return {"refinement_fraction_of_vi": refine / (VI_STEPS * seconds["vi_hybrid_bn"]),
          "vi_over_tfp": seconds["vi_hybrid_bn"] / seconds["tfp_vi_hybrid_bn"],
          "projected_hours": hours}


def main(argv):
  del argv
  options = flags.FLAGS
  if options.only:
    cli.require(options.only in MEASUREMENTS,
                f"--only={options.only!r} is not allowed; allowed: {', '.join(MEASUREMENTS)}")
    print(json.dumps(measure(options.only, tuple(int(d) for d in options.image_shape),
                             options.steps)))
    return
  cli.require(bool(options.output_dir), "--output_dir is required")
  cli.require(options.steps >= 1 and options.rounds >= 1,
              f"--steps={options.steps} and --rounds={options.rounds} must be >= 1")
  samples = fresh_process.interleaved_rounds(
      MEASUREMENTS, options.rounds, lambda name: fresh_process.measure(
          "benchmarks.resnet_speed", [f"--only={name}", f"--steps={options.steps}",
                                      f"--image_shape={','.join(options.image_shape)}"]))
  results = {name: dict(rounds[0], seconds_per_step=statistics.median(
      r["seconds_per_step"] for r in rounds), rounds=[r["seconds_per_step"] for r in rounds])
             for name, rounds in samples.items()}
  command = " ".join(["python -m benchmarks.resnet_speed"] + sys.argv[1:])
  results["derived"] = derived(results)
  results.update(command=command, git_commit=git_commit(), machine=machine_description())
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), results)
  lines = [f"# ResNet-20 step times, batch {BATCH}, images {','.join(options.image_shape)}", "",
           f"Command: `{command}`", "",
           "| measurement | s per step (median) | GFLOPs per step | peak memory (MB) |",
           "|---|---|---|---|"]
  for name in MEASUREMENTS:
    row = results[name]
    lines.append(f"| {name} | {row['seconds_per_step']:.2f} | {row['flops_per_step'] / 1e9:.1f} | "
                 f"{row['peak_memory_mb']:.0f} |")
  hours = results["derived"]["projected_hours"]
  lines += ["", f"Paper settings ({VI_STEPS:,} VI steps, K * T = {REFINE_STEPS:,} refinement steps "
            f"of M = {MEMBERS}, {EQUAL_COMPUTE_STEPS:,} equal-compute steps, {SEEDS} seeds), "
            "projected on this machine:", "",
            f"- refinement / VI training time: "
            f"{results['derived']['refinement_fraction_of_vi']:.2f}",
            f"- our VI step / tfp.layers VI step: {results['derived']['vi_over_tfp']:.2f}",
            f"- a whole Table 3 (4 variants x vi, refined_vi, vi_equal_compute; ensembles with and "
            f"without batch norm) x {SEEDS} seeds: {hours['table3']:,.0f} hours"]
  text = "\n".join(lines) + "\n"
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("only", None, "Measure one variant in this process and print JSON.")
  flags.DEFINE_list("image_shape", ["32", "32", "3"], "Height, width, channels.")
  flags.DEFINE_integer("steps", 5, "Timed steps per measurement.")
  flags.DEFINE_integer("rounds", 3, "Processes per measurement; the median is reported.")
  cli.run(main)
