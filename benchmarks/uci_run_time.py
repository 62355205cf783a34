"""A user's wall time for one whole UCI run (start-up, VI, refinement, the rest), per loop setting.

Each variant runs the UCI binary as a user would, `python -m uci.main ...`, in a fresh process,
in interleaved rounds (median reported):
  default       the binary's defaults: one intra-op thread for the refined methods, VI's chunks
                of 100 steps compiled by XLA (--jit_compile --noise_chunk_steps=100),
                refinement's drawn the same way, traced on a second thread while VI trains
                (--prepare_refinement);
  not_prepared  the same with refinement traced when it starts (--noprepare_refinement);
  tensorflow_threads  the same as default with --intra_op_threads=0: TensorFlow's choice of
                threads (every core) instead of the refined methods' one thread;
  compiled_refinement  the default with refinement's chunks compiled too
                (--jit_compile_refinement), the compiling done beside VI;
  compiled_refinement_not_prepared  the same, compiled when refinement starts;
  xla_cached    the same with --xla_cache_dir, its cache filled by an untimed run first (a rerun,
                another seed or method of the same shapes);
  xla_cached_compiled_refinement  both: refinement's compile is paid once per shape;
  uncompiled    --nojit_compile --noise_chunk_steps=0: each step draws its own noise, in graph
                mode (the default before XLA's).
The binary's own timings split the wall time: start-up is what passes before its clock starts
(Python, TensorFlow's import and device set-up), then VI training, refinement (stage estimates
included) and the rest (data, ELBO estimates, evaluation, writing). Each loop's set-up is its
first call's time beyond the pace of its later calls: tracing and compiling it; a refinement
prepared beside VI reports how long that took on its thread (overlapping VI's time). Every XLA
variant sees the same numbers, so their test MLL agrees (to round-off where refinement is
compiled); the uncompiled one's differs by the chunking of its random streams.

  python -m benchmarks.uci_run_time --rounds=3 --output_dir=results/benchmarks/uci_run_time
  (--variants=default,xla_cached: only those, e.g. more rounds of the ones in question)
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import flags

from runner import cli
from common.results import (git_commit, machine_description, write_json_atomically,
                            write_text_atomically)

VARIANTS = {"default": (), "not_prepared": ("--noprepare_refinement",),
            "tensorflow_threads": ("--intra_op_threads=0",),
            "compiled_refinement": ("--jit_compile_refinement",),
            "compiled_refinement_not_prepared": ("--jit_compile_refinement",
                                                 "--noprepare_refinement"),
            "xla_cached": (),
            "xla_cached_compiled_refinement": ("--jit_compile_refinement",),
            "uncompiled": ("--nojit_compile", "--noise_chunk_steps=0")}

flags.DEFINE_string("output_dir", None, "Where speed.json and speed.md go.")
flags.DEFINE_string("dataset", "boston_housing", "UCI dataset of the runs.")
flags.DEFINE_string("method", "refined_vi", "Method of the runs.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median is reported.")
flags.DEFINE_list("variants", list(VARIANTS), "Variants to run, in this order within a round.")
flags.DEFINE_list("uci_flags", [], "More flags for every run (tests shorten the runs with them).")


def run_binary(arguments: list[str], output_dir: str) -> dict:
  """Runs the UCI binary once; its wall time, its results.json timings and its test MLL."""
  # Without $TF_NUM_INTRAOP_THREADS (run_table.sh's parallel jobs set it), which would make the
  # default and tensorflow_threads variants the same.
  environment = {name: value for name, value in os.environ.items()
                 if name != "TF_NUM_INTRAOP_THREADS"}
  started = time.perf_counter()
  completed = subprocess.run([sys.executable, "-m", "uci.main", f"--output_dir={output_dir}",
                              *arguments], capture_output=True, text=True, check=False,
                             env={**environment, "TF_CPP_MIN_LOG_LEVEL": "3"})
  wall = time.perf_counter() - started
  if completed.returncode != 0:
    lines = completed.stderr.strip().splitlines() or ["(no error output)"]
    raise RuntimeError(f"uci.main {' '.join(arguments)}: {lines[-1]}")
  with open(os.path.join(output_dir, "results.json")) as handle:
    results = json.load(handle)
  timings = results["timings"]
  refine = timings.get("refine_total_seconds", 0.0)   # stage estimates included
  return {"wall_seconds": wall, "startup_seconds": wall - timings["total_seconds"],
          "train_seconds": timings["train_seconds"],
          # Not recorded for a loop run as one chunk (then NaN, printed as "-").
          "train_setup_seconds": timings.get("train_setup_seconds", math.nan),
          "refine_seconds": refine,
          "refine_setup_seconds": timings.get("refine_setup_seconds", math.nan),
          # On the second thread, during VI (NaN when refinement was not prepared).
          "refine_prepare_seconds": timings.get("refine_prepare_seconds", math.nan),
          "other_seconds": timings["total_seconds"] - timings["train_seconds"] - refine,
          "intra_op_threads": results["machine"]["intra_op_threads"],
          "test_mll": results["metrics"]["test_mll"]}


def _median(values) -> float:
  """The median, NaN if any value is (a part some run did not record)."""
  values = list(values)
  return math.nan if any(math.isnan(v) for v in values) else statistics.median(values)


def _seconds(value: float) -> str:
  return "-" if math.isnan(value) else f"{value:.1f}"


def main(argv):
  del argv
  options = flags.FLAGS
  cli.require(options.rounds >= 1, f"--rounds={options.rounds} must be >= 1")
  cli.require(bool(options.output_dir), "--output_dir is required")
  unknown = [variant for variant in options.variants if variant not in VARIANTS]
  cli.require(bool(options.variants) and not unknown
              and len(set(options.variants)) == len(options.variants),
              f"--variants={','.join(options.variants)}: allowed: one or more of "
              f"{', '.join(VARIANTS)}, each once")
  common_flags = [f"--dataset={options.dataset}", f"--method={options.method}",
                  *options.uci_flags]
  with tempfile.TemporaryDirectory() as scratch:
    cache = os.path.join(scratch, "xla_cache")

    def arguments(variant: str) -> list[str]:
      cached = [f"--xla_cache_dir={cache}"] if variant.startswith("xla_cached") else []
      return [*common_flags, *VARIANTS[variant], *cached]

    if any(variant.startswith("xla_cached") for variant in options.variants):
      # Fills the cache with VI's and refinement's compiled chunks.
      run_binary(arguments("xla_cached_compiled_refinement"), os.path.join(scratch, "fill_cache"))
    samples = {variant: [] for variant in options.variants}
    for round_number in range(options.rounds):
      for variant in options.variants:
        samples[variant].append(run_binary(
            arguments(variant), os.path.join(scratch, f"{variant}_{round_number}")))
  columns = ("wall_seconds", "startup_seconds", "train_seconds", "train_setup_seconds",
             "refine_seconds", "refine_setup_seconds", "refine_prepare_seconds", "other_seconds")
  results = {variant: {**{column: _median(r[column] for r in runs)
                          for column in columns},
                       "wall_seconds_rounds": [r["wall_seconds"] for r in runs],
                       "intra_op_threads": runs[0]["intra_op_threads"],
                       "test_mll": runs[0]["test_mll"]} for variant, runs in samples.items()}
  command = " ".join(["python -m benchmarks.uci_run_time"] + sys.argv[1:])
  write_json_atomically(os.path.join(options.output_dir, "speed.json"), {
      "results": results, "rounds": options.rounds, "command": command,
      "git_commit": git_commit(), "machine": machine_description()})
  lines = [f"# A whole UCI run, {options.method} on {options.dataset}, as a user starts it", "",
           f"Command: `{command}` (median of {options.rounds} interleaved rounds, each run a "
           "fresh `python -m uci.main`)", "",
           "| variant | wall (s) | start-up | VI training | of which set-up | refinement "
           "| of which set-up | prepared beside VI | rest | test MLL |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for variant, row in results.items():
    cells = [_seconds(row[column]) for column in columns]
    lines.append(f"| {variant} | {' | '.join(cells)} | {row['test_mll']:.4f} |")
  text = "\n".join(lines) + "\n"
  write_text_atomically(os.path.join(options.output_dir, "speed.md"), text)
  print(text)


if __name__ == "__main__":
  cli.run(main)
