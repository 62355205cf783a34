"""Running an absl binary with the project's conventions.

`main(ConfigClass, train_and_evaluate)` is the whole `__main__` of a benchmark
binary: it generates one flag per field of the config dataclass (help text,
choices and bounds from `common.config.setting`), checks the values and the
output directory before TensorFlow loads, refuses to reuse a results.json
made with other settings, picks the devices from the hardware flags
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
import glob
import json
import logging
import os
import sys
from typing import Any, Callable, Iterator, Optional, Sequence

from absl import app, flags
from absl import logging as absl_logging

from common.config import Config, UsageError, describe_allowed, describe_differences, field_type
from common.distribution import (DeviceConfig, describe_strategy, multi_worker_strategy,
                                 replica_loop_settings, set_thread_count,
                                 split_cpu_for_tests, strategy_for, use_xla_cache)
from common.results import RESULTS_FILENAME, note_start_commit

__all__ = ["UsageError", "main", "require", "run", "flag_values", "quiet_tensorflow_startup"]

# Left behind by a process killed while writing a file atomically (common.results,
# methods.trainers.training).
STALE_TEMPORARY_PATTERNS = (".tmp-*", "*.npz.tmp")


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


def _help_text(field: dataclasses.Field) -> str:
  allowed = describe_allowed(field)
  text = field.metadata.get("help") or field.name.replace("_", " ")
  return f"{text} Allowed: {allowed}." if allowed and not field.metadata.get("choices") else text


_DEFINERS = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}


# Settings declared in these packages are a method's own (`methods.registry`): their flags are
# grouped under the method's module in --helpfull.
METHOD_PACKAGES = ("methods.",)


def declaring_module(config_class: type, name: str) -> str:
  """The module of the class that first declared field `name` among `config_class`'s bases (a
  method's settings class, say, even where a benchmark overrides the default)."""
  for base in reversed(config_class.__mro__):
    if name in vars(base).get("__annotations__", {}):
      return base.__module__
  return config_class.__module__


def define_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """One flag per field of `config_class` (enum flags for choices, list flags for tuples).

  The benchmark's, the device's and the settings every method takes count as the main module's,
  so `--help` lists them; each method's own settings are listed by `--helpfull` under the
  module that declares them (methods/<method>.py).
  """
  main_module = sys.argv[0]
  for field in dataclasses.fields(config_class):
    kind, is_tuple = field_type(config_class, field)
    # The declared default: an instance may resolve it (ImageConfig's pixel_scaling "by_method").
    default, help_text = field.default, _help_text(field)
    choices = field.metadata.get("choices")
    module = declaring_module(config_class, field.name)
    if not module.startswith(METHOD_PACKAGES):
      module = main_module
    arguments = dict(module_name=module, flag_values=flag_values)
    if is_tuple:
      flags.DEFINE_list(field.name, [str(value) for value in default], help_text, **arguments)
    elif choices and kind is str:
      flags.DEFINE_enum(field.name, default, list(choices), help_text, **arguments)
    else:
      _DEFINERS.get(kind, flags.DEFINE_string)(field.name, default, help_text, **arguments)
  flags.DEFINE_string("output_dir", None, "Where results.json, checkpoints and summaries go "
                      "(created if missing).", module_name=main_module, flag_values=flag_values)
  flags.DEFINE_bool("tf_log", False,
                    "Show TensorFlow's own start-up and checkpoint logging on stderr.",
                    module_name=main_module, flag_values=flag_values)


def config_from_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> Config:
  """The config the parsed flags describe (list flags converted element-wise); unchecked but for
  a setting turned on on the command line without the setting it needs (`only_with`)."""
  values = {}
  for field in dataclasses.fields(config_class):
    kind, is_tuple = field_type(config_class, field)
    value = flag_values[field.name].value
    if is_tuple:
      try:
        value = tuple(kind(element) for element in value)
      except ValueError:
        raise UsageError(
            f"{field.name}={','.join(value)} must list values of type {kind.__name__}") from None
    values[field.name] = value
  for field in dataclasses.fields(config_class):
    needed = field.metadata.get("only_with")
    if needed and values[field.name] and flag_values[field.name].present and not values[needed]:
      raise UsageError(f"--{field.name} does nothing without --{needed}; allowed: it with "
                       f"--{needed}")
  return config_class(**values)


def prepare_output_dir(output_dir: str) -> bool:
  """Creates `output_dir` or raises UsageError in one line if it cannot hold results; returns
  whether it was created."""
  require(bool(output_dir), "--output_dir is required")
  existed = os.path.isdir(output_dir)
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    raise UsageError(
        f"--output_dir={output_dir} is a file; it must be a directory (or not exist yet)")
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as error:
    raise UsageError(f"--output_dir={output_dir} cannot be created: {error.strerror}") from None
  if not os.access(output_dir, os.W_OK | os.X_OK):
    raise UsageError(f"--output_dir={output_dir} is not writable")
  return not existed


@contextlib.contextmanager
def removed_if_failed_empty(output_dir: str, created: bool) -> Iterator[None]:
  """Deletes `output_dir` again if it was `created` for a run that then failed before writing
  any file in it (a refused checkpoint, bad data), so a refusal leaves nothing behind. Only empty
  folders are removed (bottom up, `os.rmdir`), so a failed run's checkpoints or summaries, or a
  file another process wrote meanwhile, are kept; the run's own error is what is reported."""
  try:
    yield
  except BaseException:
    if created:
      for folder, _, _ in sorted(os.walk(output_dir), key=lambda entry: -len(entry[0])):
        try:
          os.rmdir(folder)
        except OSError:
          pass
    raise


def remove_stale_temporaries(output_dir: str) -> list[str]:
  """Deletes half-written files a killed run left under `output_dir`; returns their paths."""
  stale = []
  for pattern in STALE_TEMPORARY_PATTERNS:
    stale += glob.glob(os.path.join(output_dir, "**", pattern), recursive=True)
  for path in stale:
    os.remove(path)
  return stale


def recorded_differences(config: Config, output_dir: str) -> Optional[tuple[list[str], dict]]:
  """None if `output_dir` holds no results.json; else (the names of the settings whose value
  there differs from `config`'s, empty for a run made with these settings; the recorded flags).

  The one decision of "already made with these settings": the binaries' reruns
  (`finished_run_matches`) and `runner.made` both ask it.
  """
  path = os.path.join(output_dir, RESULTS_FILENAME)
  if not os.path.exists(path):
    return None
  with open(path) as handle:
    recorded = json.load(handle).get("flags", {})
  return config.differences(recorded), recorded


def finished_run_matches(config: Config, output_dir: str) -> bool:
  """Whether `output_dir` already holds results.json of a run with these settings.

  Raises UsageError naming the differing flags if it holds one with other
  settings, unless `config.replace_mismatched` (then the old file is removed).
  """
  found = recorded_differences(config, output_dir)
  if found is None:
    return False
  differing, recorded = found
  if not differing:
    return True
  path = os.path.join(output_dir, RESULTS_FILENAME)
  if config.replace_mismatched:
    os.remove(path)
    return False
  raise UsageError(
      f"{path} was made with other settings: {describe_differences(config, recorded, differing)}; "
      "use another --output_dir, or --replace_mismatched to rerun")


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
  """Sends file descriptor 2 to /dev/null.

  C++ logging before absl::InitializeLog ignores levels.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with open(os.devnull, "w") as devnull:
    os.dup2(devnull.fileno(), 2)
  try:
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)


def quiet_tensorflow_startup(show_logging: bool = False, intra_op_threads: int = 0,
                             xla_cache_dir: Optional[str] = None,
                             multi_worker: bool = False) -> None:
  """Imports TensorFlow (its XLA cache at `xla_cache_dir`, if given), sets its threads, joins the
  workers of $TF_CONFIG if `multi_worker` (before the devices start) and finds its devices,
  without its start-up noise on stderr.

  Also silences TensorFlow's INFO and WARNING logging (for example the checkpoint
  saver's per-save lines) unless `show_logging`.
  """
  if not show_logging:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if xla_cache_dir is not None:
    use_xla_cache(xla_cache_dir)
  with contextlib.nullcontext() if show_logging else stderr_silenced():
    import tensorflow as tf
    split_cpu_for_tests()
    set_thread_count(intra_op_threads)
    if multi_worker:
      multi_worker_strategy()
    tf.config.list_logical_devices()
  if show_logging:
    return
  tf.get_logger().setLevel("ERROR")
  absl_logging.get_absl_handler().addFilter(_drop_tensorflow_info)


def _drop_tensorflow_info(record: logging.LogRecord) -> bool:
  """Keeps our progress lines; drops TensorFlow's own INFO lines (e.g. one per checkpoint save)."""
  return record.levelno > logging.INFO or f"{os.sep}tensorflow{os.sep}" not in record.pathname


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
  --noise_chunk_steps, reach the trainers as arguments: `common.distribution.loop_settings_of`.)"""
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
    remove_stale_temporaries(output_dir)
    if finished_run_matches(config, output_dir):
      print(f"{os.path.join(output_dir, RESULTS_FILENAME)} already holds this run; nothing to do")
      return
    note_start_commit()
    with removed_if_failed_empty(output_dir, created):
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
