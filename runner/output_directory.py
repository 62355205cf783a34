"""A run's output directory: made or refused before any work, and whether it holds this run.

A binary's --output_dir must be a directory it can write (made if missing; removed again if the
run fails before writing anything); half-written files a killed run left there are deleted; and
a results.json already there either is this run (made with these settings: nothing to do) or
names the settings that differ, the one decision `runner.made` also asks.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
from typing import Iterator, Optional

from common.cluster import cluster_of_workers
from common.config import Config, UsageError, describe_differences
from common.results import RESULTS_FILENAME

# Left behind by a process killed while writing a file atomically (common.results,
# methods.trainers.training).
STALE_TEMPORARY_PATTERNS = (".tmp-*", "*.npz.tmp")


def prepare_output_dir(output_dir: str) -> bool:
  """Creates `output_dir` or raises UsageError in one line if it cannot hold results; returns
  whether it was created."""
  if not output_dir:
    raise UsageError("--output_dir is required")
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


def remove_stale_temporaries(output_dir: str, multi_worker: bool = False) -> list[str]:
  """Deletes half-written files a killed run left under `output_dir`; returns their paths.

  On a --multi_worker run only the chief does (before TensorFlow starts, from $TF_CONFIG): the
  other workers start at other times and would delete the files the chief is writing."""
  if multi_worker and not cluster_of_workers().is_chief:
    return []
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
