"""Running an absl binary with the project's conventions.

`main(ConfigClass, train_and_evaluate)` is the whole `__main__` of a benchmark
binary: it generates one flag per field of the config dataclass (help text,
choices and bounds from `common.config.setting`; `runner.config_flags`), checks
the values and the output directory before TensorFlow loads, refuses to reuse a
results.json made with other settings (`runner.output_directory`), starts TensorFlow
quietly (`runner.tensorflow_startup`), picks the devices from the hardware flags
(`common.distribution`), then calls `train_and_evaluate(config, output_dir)`
inside that strategy's scope.

Bad input (unknown flag, value out of range, unusable output directory) prints
one line on stderr naming the value and what is allowed and exits with status
2; a runtime failure (missing file, non-finite loss) prints one line and exits
with status 1. No results file is written in either case.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
from typing import Any, Callable, Iterator, Sequence

from absl import app, flags
from absl import logging as absl_logging

from common.config import Config, UsageError
from common.distribution import (DeviceConfig, describe_strategy, replica_loop_settings,
                                 strategy_for)
from common.results import RESULTS_FILENAME, note_start_commit
from runner.config_flags import config_from_flags, define_flags
from runner.output_directory import (finished_run_matches, prepare_output_dir,
                                     remove_stale_temporaries, removed_if_failed_empty)
from runner.tensorflow_startup import quiet_tensorflow_startup

__all__ = ["UsageError", "main", "require", "run", "flag_values"]


def require(condition: bool, message: str) -> None:
  """Raises UsageError(message) unless `condition`."""
  if not condition:
    raise UsageError(message)


def flag_values(names: Sequence[str]) -> dict[str, Any]:
  """The values of the named flags, for results files."""
  return {name: flags.FLAGS[name].value for name in names}


def _fail(message: str, status: int) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(status)


_HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    _fail(str(error), 2)
  except SystemExit:
    if any(argument in _HELP_FLAGS for argument in argv[1:]):
      sys.exit(0)   # absl exits 1 after printing help; asking for help is not a failure
    raise


def _is_runtime_error(error: BaseException) -> bool:
  """Failures of a run that a user can read in one line (TensorFlow's op errors included)."""
  return (isinstance(error, (OSError, FloatingPointError, RuntimeError, ValueError))
          or type(error).__module__.startswith("tensorflow"))


def _measured() -> bool:
  """Whether a profiler or tracer watches the interpreter (sys.setprofile / settrace; from Python
  3.12 cProfile and coverage may use sys.monitoring instead)."""
  if sys.getprofile() is not None or sys.gettrace() is not None:
    return True
  monitoring = getattr(sys, "monitoring", None)
  return monitoring is not None and any(
      monitoring.get_tool(tool) is not None
      for tool in (monitoring.PROFILER_ID, monitoring.COVERAGE_ID, monitoring.DEBUGGER_ID))


def _leave_without_teardown() -> None:
  """Ends a finished binary at once: flushes what Python buffers (stdout, stderr, every logging
  handler), then os._exit(0).

  The interpreter's teardown of TensorFlow (its modules, graphs and thread pools) takes ~0.7 s at
  the end of every run on this machine, 5 % of a whole Boston run. Nothing of the run is lost by
  skipping it: by then every file a run writes is closed (results and tables are written
  atomically, checkpoints synchronously, summary writers are closed when training ends) and every
  background thread has been joined.

  Under a profiler or tracer (cProfile, coverage) the interpreter ends as usual, so that they
  write what they measured when it exits.
  """
  if _measured():
    return
  sys.stdout.flush()
  sys.stderr.flush()
  logging.shutdown()   # flushes and closes absl's handler (and its --log_dir file) and any other
  os._exit(0)


def run(main_fn: Callable[[list[str]], Any]) -> None:
  """app.run(main_fn) with one-line errors: UsageError exits 2, other run failures 1; a finished
  run exits 0 without the interpreter's teardown."""
  def wrapped(argv):
    if len(argv) > 1:
      _fail(f"unexpected positional arguments {argv[1:]}; use --flag=value", 2)
    try:
      main_fn(argv)
    except UsageError as error:
      _fail(str(error), 2)
    except Exception as error:  # noqa: BLE001 - only the kinds below become one line
      if not _is_runtime_error(error):
        raise
      _fail(str(error) or type(error).__name__, 1)
    _leave_without_teardown()
  app.run(wrapped, flags_parser=_parse_flags)


@contextlib.contextmanager
def _strategy_scope(config: Config) -> Iterator[Any]:
  """Builds and trains everything under the strategy the hardware flags pick (if the config has
  them, and no strategy is in force already: a script's own scope is kept); UsageError if the
  hardware disagrees with the flags."""
  import tensorflow as tf
  if not isinstance(config, DeviceConfig) or tf.distribute.has_strategy():
    yield tf.distribute.get_strategy()
    return
  strategy = strategy_for(config)
  if config.use_gpu or config.tpu or config.multi_worker:
    # Without a hardware flag it is one device: no line (results.json records it either way).
    description = describe_strategy(strategy)
    absl_logging.info("training on %d replica(s) (%s): %s", description["replicas"],
                      description["strategy"], ", ".join(description["devices"]))
  with strategy.scope():
    yield strategy


def runs_under_its_device_settings(train_and_evaluate: Callable[..., dict]
                                   ) -> Callable[..., dict]:
  """A binary's `train_and_evaluate(config, ...)` that runs under the strategy its hardware flags
  pick (--use_gpu, --tpu, --num_cores), whether `main` or a script calls it, so that the hardware
  its results.json records is the one it ran on. (Its loop settings, --jit_compile and
  --noise_chunk_steps, reach the trainers as arguments:
  `methods.loop_settings.loop_settings_of`.)"""
  @functools.wraps(train_and_evaluate)
  def under_settings(config: Config, *args, **kwargs) -> dict:
    with _strategy_scope(config) as strategy:
      return train_and_evaluate(replica_loop_settings(config, strategy.num_replicas_in_sync),
                                *args, **kwargs)
  under_settings.runs_under_device_settings = True
  return under_settings


def _has_device_settings(config_class: type) -> bool:
  """Whether a config declares hardware flags or training-loop flags."""
  names = {field.name for field in dataclasses.fields(config_class)}
  return issubclass(config_class, DeviceConfig) or "noise_chunk_steps" in names


def main(config_class: type, train_and_evaluate: Callable[[Config, str], dict],
         printed_metrics: Sequence[str] = ()) -> None:
  """The whole `__main__` of a benchmark binary: flags -> config -> train_and_evaluate -> results.

  `train_and_evaluate(config, output_dir)` writes output_dir/results.json and
  returns the metrics; those named in `printed_metrics` are printed. A config with hardware or
  loop flags needs `train_and_evaluate` wrapped in `runs_under_its_device_settings`.
  """
  if _has_device_settings(config_class) and not getattr(
      train_and_evaluate, "runs_under_device_settings", False):
    raise TypeError(f"{config_class.__name__} has hardware or loop flags: wrap "
                    "train_and_evaluate in cli.runs_under_its_device_settings")
  define_flags(config_class)

  def run_config(argv):
    del argv
    config = config_from_flags(config_class)
    config.validate()
    output_dir = flags.FLAGS.output_dir
    created = prepare_output_dir(output_dir)
    remove_stale_temporaries(output_dir, getattr(config, "multi_worker", False))
    if finished_run_matches(config, output_dir):
      print(f"{os.path.join(output_dir, RESULTS_FILENAME)} already holds this run; nothing to do")
      return
    note_start_commit()
    with removed_if_failed_empty(output_dir, created):
      config.locate_data()
      quiet_tensorflow_startup(flags.FLAGS.tf_log, config.thread_count(),
                               getattr(config, "xla_cache_dir", None),
                               getattr(config, "multi_worker", False))
      metrics = train_and_evaluate(config, output_dir)
    for name in printed_metrics:
      if name in metrics:
        value = metrics[name]
        print(
            f"{name}: {value:.4f}" if isinstance(value, float) else f"{name}: {json.dumps(value)}")
  run(run_config)
