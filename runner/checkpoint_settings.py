"""The settings a checkpoint was made with, recorded beside it.

The record makes sure that a rerun never resumes the wrong state.

A checkpoint directory holds `settings.json`: the settings that shape the
trained state (seed, dataset, split, architecture, the trainer's own flags;
`common.config.Config.identity`). Before training resumes, the requested
settings are compared with it; a difference is a usage error naming the
differing flags, or, when the user asks for it, the old state is discarded.
"""
from __future__ import annotations

import fnmatch
import json
import os
from typing import Any, Mapping

from common.config import UsageError, describe_settings, differing_settings
from common.distribution import writes_run_files
from common.results import write_json_atomically
from runner.output_directory import STALE_TEMPORARY_PATTERNS

SETTINGS_FILENAME = "settings.json"
# What methods.trainers.training and auxiliary_sampling.refinement_checkpoint write:
# tf.train.CheckpointManager's files, the trace, a refinement's progress, files half-written.
CHECKPOINT_FILE_PATTERNS = ("checkpoint", "ckpt-*", "trace.npz", "*.npz.tmp",
                            "refinement_progress-*.npz", ".tmp-*")


def _checkpoint_files(checkpoint_dir: str) -> list[str]:
  """The files a trainer writes into a checkpoint directory (settings record excluded)."""
  if not os.path.isdir(checkpoint_dir):
    return []
  return [name for name in os.listdir(checkpoint_dir)
          if any(fnmatch.fnmatch(name, pattern) for pattern in CHECKPOINT_FILE_PATTERNS)]


def _saved_state(checkpoint_dir: str) -> list[str]:
  """The checkpoint files that hold state: not the temporary files being written atomically
  (`runner.output_directory.STALE_TEMPORARY_PATTERNS`), which hold none yet."""
  return [name for name in _checkpoint_files(checkpoint_dir)
          if not any(fnmatch.fnmatch(name, pattern) for pattern in STALE_TEMPORARY_PATTERNS)]


def claim_checkpoint_dir(checkpoint_dir: str, settings: Mapping[str, Any],
                         replace_mismatched: bool, absent_values: Mapping[str, Any]) -> None:
  """Makes `checkpoint_dir` hold state of `settings` only: records them or checks the recorded ones.

  The comparison is `common.config.differing_settings`, the one results.json
  reruns use: a setting missing from the record (added after the checkpoint was
  made) counts as its entry in `absent_values` (`common.config.absent_values`),
  so adding a setting does not orphan old checkpoints. A directory with
  checkpoint files but no settings record (made by older code) counts as a
  mismatch, since nothing says what made it; a temporary file being written is not
  such a checkpoint (a --multi_worker run's other workers check while the chief
  writes the record through one). Replacing a mismatch deletes the checkpoint
  files only, never anything else in the folder.
  """
  path = os.path.join(checkpoint_dir, SETTINGS_FILENAME)
  if os.path.exists(path):
    with open(path) as handle:
      recorded = json.load(handle)
    differing = differing_settings(settings, recorded, absent_values)
  else:
    recorded = {}
    differing = ["(no settings record)"] if _saved_state(checkpoint_dir) else []
  if differing and not replace_mismatched:
    what = ("records no settings" if not recorded else "was made with other settings: "
            + describe_settings(settings, recorded, absent_values, differing, "checkpoint"))
    raise UsageError(f"the checkpoint in {checkpoint_dir} {what}; use another directory, or "
                     "--replace_mismatched to discard it and train afresh")
  if not writes_run_files():
    return   # a --multi_worker run's other workers check; the chief records
  for name in _checkpoint_files(checkpoint_dir) if differing else ():
    os.remove(os.path.join(checkpoint_dir, name))
  if differing or not os.path.exists(path):
    os.makedirs(checkpoint_dir, exist_ok=True)
    write_json_atomically(path, settings)
