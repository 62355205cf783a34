"""The settings a checkpoint was made with, recorded beside it.

The record makes sure that a rerun never resumes the wrong state.

A checkpoint directory holds `settings.json`: the settings that shape the
trained state (seed, dataset, split, architecture, the trainer's own flags;
`common.config.Config.identity`). Before training resumes, the requested
settings are compared with it; a difference is a usage error naming the
differing flags, or, when the user asks for it, the old state is discarded.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Mapping

from common.config import UsageError
from common.results import write_json_atomically

SETTINGS_FILENAME = "settings.json"


def _describe(differing: list[str], requested: Mapping[str, Any], recorded: Mapping[str,
                                                                                    Any]) -> str:
  return ", ".join(
      f"--{name}={requested.get(name)} (checkpoint: {recorded.get(name, 'not recorded')})"
      for name in differing)


def claim_checkpoint_dir(checkpoint_dir: str, settings: Mapping[str, Any],
                         replace_mismatched: bool) -> None:
  """Makes `checkpoint_dir` hold state of `settings` only: records them or checks the recorded ones.

  A directory with checkpoint files but no settings record (made by older
  code) counts as a mismatch, since nothing says what made it.
  """
  settings = json.loads(json.dumps(
      dict(settings)))  # as JSON would give them back (tuples as lists)
  path = os.path.join(checkpoint_dir, SETTINGS_FILENAME)
  has_state = os.path.isdir(checkpoint_dir) and any(name != SETTINGS_FILENAME
                                                    for name in os.listdir(checkpoint_dir))
  if os.path.exists(path):
    with open(path) as handle:
      recorded = json.load(handle)
    differing = sorted(
        name for name in set(settings) | set(recorded) if settings.get(name) != recorded.get(name))
  else:
    recorded, differing = {}, (["(no settings record)"] if has_state else [])
  if differing:
    if not replace_mismatched:
      what = ("records no settings" if not recorded
              else f"was made with other settings: {_describe(differing, settings, recorded)}")
      raise UsageError(f"the checkpoint in {checkpoint_dir} {what}; use another directory, or "
                       "--replace_mismatched to discard it and train afresh")
    shutil.rmtree(checkpoint_dir)
  if differing or not os.path.exists(path):
    os.makedirs(checkpoint_dir, exist_ok=True)
    write_json_atomically(path, settings)
