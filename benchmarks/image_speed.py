"""LeNet-5 step times, refinement cost relative to VI training, and peak memory.

  python -m benchmarks.image_speed --output_dir=results/benchmarks/image_speed [--dataset=mnist]

Each measurement runs in its own process (so its peak resident memory is its
own): a warm-up that traces the compiled loop, then `--steps` timed Adam steps
at batch 256 on the real training set. Measured:
  vi              our mean-field LeNet-5 (Flipout convs, local-reparameterisation dense);
  tfp_reference   the straightforward model of the same network: tfp.layers
                  Convolution2DFlipout / DenseLocalReparameterization in a Keras
                  Sequential, Keras Adam (prior fixed at N(0, 1));
  refine          one refinement step of all M = 10 members together;
  deep_ensemble   one step of all 10 ensemble members, each on its own batch;
  mnf             one MNF LeNet-5 step;
  vi_xla, refine_xla  (only with --measurements) vi and refine with the noise drawn
                  ahead in 10-step chunks and each chunk compiled by XLA
                  (--noise_chunk_steps=10 --jit_compile). On this CPU XLA's
                  convolutions make the VI step 34x slower (4.8 s against 0.14 s,
                  one thread, other runs beside it): so the image binaries keep
                  --jit_compile off by default, and it is for accelerators.
Refinement at paper settings costs K * T refinement steps (5 * 200) against
30,000 VI steps; the fraction is computed from the measured step times (the
committed refined_vi runs record the measured wall times as well).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time

from absl import flags

from benchmarks import fresh_process
from runner import cli
from common.results import write_json_atomically

MEASUREMENTS = ("vi", "tfp_reference", "refine", "deep_ensemble", "mnf", "vi_xla", "refine_xla")
DEFAULT_MEASUREMENTS = MEASUREMENTS[:-2]   # XLA's convolutions are slower on this CPU
XLA_CHUNK_STEPS = 10
PAPER_VI_STEPS, PAPER_REFINE_STEPS, PAPER_MEMBERS = 30_000, 5 * 200, 10


def _tfp_reference(num_examples: int):
  """The straightforward tfp.layers LeNet-5 and a Keras-optimizer train step.

  The issue's reference point.
  """
  import tensorflow_probability as tfp
  import tf_keras
  divergence = lambda q, p, _: tfp.distributions.kl_divergence(q, p) / num_examples  # noqa: E731
  conv = dict(padding="SAME", activation="relu", kernel_divergence_fn=divergence)
  model = tf_keras.Sequential([
      tfp.layers.Convolution2DFlipout(6, 5, **conv),
      tf_keras.layers.MaxPooling2D(2),
      tfp.layers.Convolution2DFlipout(16, 5, **conv),
      tf_keras.layers.MaxPooling2D(2),
      tfp.layers.Convolution2DFlipout(120, 5, **conv),
      tf_keras.layers.Flatten(),
      tfp.layers.DenseLocalReparameterization(84, activation="relu",
                                              kernel_divergence_fn=divergence),
      tfp.layers.DenseLocalReparameterization(10, kernel_divergence_fn=divergence)
  ])
  optimizer = tf_keras.optimizers.Adam(1e-3)
  return model, optimizer


def measure(name: str, dataset: str, data_dir: str, steps: int) -> dict:
  """Seconds per step of `name` (after a traced warm-up) and this process's peak memory."""
  import numpy as np
  import tensorflow as tf

  from auxiliary_sampling.adam import Adam
  from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
  from auxiliary_sampling.loop_settings import LoopSettings
  from auxiliary_sampling.model_parameters import mean_field_parameters
  from auxiliary_sampling.predictive import categorical_log_likelihood
  from auxiliary_sampling.training_batches import UniformBatches
  from auxiliary_sampling.training_loop import TrainingLoop
  from methods.trainers.mnf import mnf_kl
  from common import images
  from image import lenet
  data = images.load(dataset, data_dir, download_allowed=False)
  x, y = data.x_train, data.y_train
  batch = 256
  if name == "tfp_reference":
    model, optimizer = _tfp_reference(len(y))
    inputs, labels = tf.constant(x[:batch]), tf.constant(y[:batch])

    @tf.function
    def run(num_steps):
      for _ in tf.range(num_steps):
        with tf.GradientTape() as tape:
          nll = -tf.reduce_mean(categorical_log_likelihood(labels, model(inputs)))
          loss = nll + tf.add_n(model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
      return loss

    def timed(num_steps):
      run(tf.constant(num_steps)).numpy()
  else:
    kl_fn, members, loop_settings = None, None, LoopSettings()
    if name in ("vi", "vi_xla"):
      model = lenet.mean_field_lenet5()
    elif name in ("refine", "refine_xla"):
      model = lenet.mean_field_lenet5(PAPER_MEMBERS)
    elif name == "deep_ensemble":
      model = lenet.ensemble_lenet5(PAPER_MEMBERS)
      zero = tf.zeros([PAPER_MEMBERS])
      kl_fn, members = (lambda: zero), PAPER_MEMBERS
    else:
      model = lenet.mnf_lenet5()
      kl_fn = lambda: mnf_kl(model)  # noqa: E731
    model(x[:1])
    variables = ([v for p in mean_field_parameters(model) for v in p.posterior_variables]
                 if name.startswith("refine") else model.trainable_variables)
    if name.endswith("_xla"):
      loop_settings = LoopSettings(jit_compile=True, noise_chunk_steps=XLA_CHUNK_STEPS)
    loop = TrainingLoop(ElboObjective(model, categorical_log_likelihood, kl_fn=kl_fn),
                        GradientUpdate(Adam(variables)),
                        UniformBatches(x, y, batch, members=members), loop_settings=loop_settings)

    def timed(num_steps):
      loop.maximize(num_steps, 1e-3)
  timed(3)
  started = time.perf_counter()
  timed(steps)
  seconds = (time.perf_counter() - started) / steps
  return {"measurement": name, "seconds_per_step": seconds, "steps": steps,
          "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "num_threads": os.environ.get("TF_NUM_INTRAOP_THREADS", "default"), "dataset": dataset,
          "num_examples": int(np.size(y))}


def run_all(dataset: str, data_dir: str, steps: int, rounds: int,
            measurements=DEFAULT_MEASUREMENTS) -> dict:
  """Every measurement in a fresh process, `rounds` times interleaved (this machine's speed drifts
  by tens of percent between minutes, so each measurement reports the median of its rounds); then
  the ratios that the measurements taken allow."""
  import numpy as np
  samples = fresh_process.interleaved_rounds(
      measurements, rounds, lambda name: fresh_process.measure(
          "benchmarks.image_speed", [f"--only={name}", f"--dataset={dataset}",
                                     f"--data_dir={data_dir}", f"--steps={steps}"]))
  results = {}
  for name, runs in samples.items():
    results[name] = {
        **runs[0], "seconds_per_step": float(np.median([r["seconds_per_step"] for r in runs])),
        "seconds_per_step_rounds": [r["seconds_per_step"] for r in runs],
        "peak_memory_mb": max(r["peak_memory_mb"] for r in runs)
    }
  step = {name: results[name]["seconds_per_step"] for name in measurements}
  derived = {}
  if "vi" in step:
    derived.update(vi_ms_per_step=1000 * step["vi"],
                   paper_vi_training_minutes=PAPER_VI_STEPS * step["vi"] / 60)
  for name in ("vi_xla", "refine_xla"):
    if name in step:
      derived[f"{name}_ms_per_step"] = 1000 * step[name]
  if "tfp_reference" in step:
    derived["tfp_reference_ms_per_step"] = 1000 * step["tfp_reference"]
  if "refine" in step:
    derived.update(refine_ms_per_member_step=1000 * step["refine"] / PAPER_MEMBERS,
                   paper_refinement_minutes=PAPER_REFINE_STEPS * step["refine"] / 60)
    if "vi" in step:
      derived["refinement_fraction_of_vi_training"] = PAPER_REFINE_STEPS * step["refine"] / (
          PAPER_VI_STEPS * step["vi"])
  if "deep_ensemble" in step:
    derived["deep_ensemble_minutes_5000_steps"] = 5000 * step["deep_ensemble"] / 60
  if "mnf" in step:
    derived["mnf_training_minutes"] = PAPER_VI_STEPS * step["mnf"] / 60
  results["derived"] = derived
  return results


def _markdown(results: dict, command: str) -> str:
  lines = [
      "# LeNet-5 speed (batch 256)", "", f"Command: `{command}`", "",
      "| measurement | ms per step (median) | rounds (ms) | peak memory (MB) |", "|---|---|---|---|"
  ]
  for name in (name for name in MEASUREMENTS if name in results):
    row = results[name]
    rounds = ", ".join(f"{1000 * value:.0f}" for value in row["seconds_per_step_rounds"])
    lines.append(
        f"| {name} | {1000 * row['seconds_per_step']:.1f} | {rounds} | "
        f"{row['peak_memory_mb']:.0f} |"
    )
  derived = results["derived"]
  lines.append("")
  if "paper_vi_training_minutes" in derived:
    lines.append(
        "- VI training at paper settings (30,000 steps): "
        f"{derived['paper_vi_training_minutes']:.1f} min."
    )
  if "refinement_fraction_of_vi_training" in derived:
    lines.append(
        "- Refinement at paper settings (M = 10, K = 5, T = 200): "
        f"{derived['paper_refinement_minutes']:.1f} "
        f"min: {100 * derived['refinement_fraction_of_vi_training']:.1f} % of VI training.")
  if "deep_ensemble_minutes_5000_steps" in derived:
    lines.append(
        "- Deep ensemble (10 members x 5,000 steps): "
        f"{derived['deep_ensemble_minutes_5000_steps']:.1f} min."
    )
  if "mnf_training_minutes" in derived:
    lines.append(f"- MNF (30,000 steps): {derived['mnf_training_minutes']:.1f} min.")
  lines.append("")
  return "\n".join(lines)


def main(argv):
  del argv
  if flags.FLAGS.only:
    cli.require(flags.FLAGS.only in MEASUREMENTS,
                f"--only={flags.FLAGS.only!r} must be one of {MEASUREMENTS}")
    print(
        json.dumps(
            measure(flags.FLAGS.only, flags.FLAGS.dataset, flags.FLAGS.data_dir,
                    flags.FLAGS.steps)))
    return
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  measurements = tuple(flags.FLAGS.measurements)
  for name in measurements:
    cli.require(name in MEASUREMENTS,
                f"--measurements has {name!r}; allowed: {', '.join(MEASUREMENTS)}")
  cli.require(flags.FLAGS.steps >= 1 and flags.FLAGS.rounds >= 1,
              f"--steps={flags.FLAGS.steps} and --rounds={flags.FLAGS.rounds} must be >= 1")
  from common.results import atomic_output, git_commit, machine_description
  results = run_all(flags.FLAGS.dataset, flags.FLAGS.data_dir, flags.FLAGS.steps,
                    flags.FLAGS.rounds, measurements)
  command = " ".join(["python -m benchmarks.image_speed"] + sys.argv[1:])
  results.update(command=command, git_commit=git_commit(), machine=machine_description())
  write_json_atomically(os.path.join(flags.FLAGS.output_dir, "speed.json"), results)
  with atomic_output(os.path.join(flags.FLAGS.output_dir,
                                  "speed.md")) as temporary, open(temporary, "w") as handle:
    handle.write(_markdown(results, command))
  print(_markdown(results, command))


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
  flags.DEFINE_string("only", None, "Internal: run one measurement and print it as JSON.")
  flags.DEFINE_string("dataset", "mnist", "mnist, fashion_mnist or cifar10.")
  flags.DEFINE_string("data_dir", os.environ.get("REFINED_VI_DATA_DIR"), "Local data directory.")
  flags.DEFINE_integer("steps", 30, "Timed steps per measurement.")
  flags.DEFINE_integer("rounds", 3,
                       "Interleaved repetitions of every measurement (the median is reported).")
  flags.DEFINE_list("measurements", list(DEFAULT_MEASUREMENTS),
                    "Which measurements to take (also: vi_xla and refine_xla, their loops "
                    "compiled with XLA in 10-step chunks).")
  cli.run(main)
