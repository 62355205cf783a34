"""The commands that remake a related-methods table's runs, read from what each run recorded.

A table ends with them (`commands_section`): one `common/run_table.sh` line per group of runs
made alike at one code commit, one `python -m <benchmark>.main` line per other run, each with
the recorded settings that differ from today's defaults, in the order their code was written.
"""
from __future__ import annotations

import json
import os
import re
from typing import Mapping, Optional, Sequence

import pandas as pd

from common.config import recorded_config
from common.results import git_history_positions


def commands_section(runs: pd.DataFrame, config_class: type, table_command: str) -> list[str]:
  """Markdown lines ending a table: the commands that remake its runs
  (`reproduction_commands`), then the one that writes the table."""
  history = git_history_positions()
  commands = reproduction_commands(runs, config_class, history)
  note = (" (`--noise_chunk_steps=0`: the per-step draws of runs made before the compiled loop)"
          if any("--noise_chunk_steps=0" in command for command in commands) else "")
  unknown = sorted({commit[:7] for commit in map(_start_commit, runs.to_dict("records"))
                    if commit and commit not in history})
  unknown_note = (f" This repository does not hold {', '.join(unknown)}, where runs started (a "
                  "shallow clone?): a line all of whose runs started there comes last, in no "
                  "known order." if unknown else "")
  return ["", "## Commands", "",
          "Each line remakes its runs' settings, with the settings each run recorded where they "
          f"differ from today's defaults{note}. Its runs were made at the code it names, where "
          "the line (without the flags that code did not have yet) remakes them bit for bit; "
          "a later commit may draw other random numbers. Runs of one dataset and seed share its "
          "VI (or VOGN) checkpoint across run_table.sh lines: the first line run trains it, at "
          "its own code, so run them in the order given, that in which their code was written."
          f"{unknown_note} Then `{table_command}` writes this file.", "",
          *commands]


# Settings that name the run rather than shape it: the run_table line gives them.
_RUN_NAMING = ("dataset", "method", "seed", "vi_checkpoint_dir")
# <root>/<benchmark>/<dataset>/<method>/seed_<s>/results.json: a run of a run_table.sh layout.
_TABLE_LAYOUT = re.compile(r"^(?P<root>.+)/(?P<benchmark>[a-z_]+)/(?P<dataset>[^/]+)/"
                           r"(?P<method>[^/]+)/seed_(?P<seed>[0-9]+)/results\.json$")


def _flags_beyond_defaults(record: dict, config_class: type) -> tuple[str, str]:
  """The settings a run recorded that remake it bit for bit (`Config.remake_settings`) and differ
  from today's defaults for its method and dataset, as flags (a setting missing from the record
  counts as what runs did before it existed, `absent_values`; values as the config resolves
  them); and the names of those the record lacks, which the run's own code did not have (there
  they are what it did anyway)."""
  naming = {"method": record["method"], "dataset": record["dataset"]}
  flags = record.get("flags", {})
  defaults = config_class(**naming)
  recorded = recorded_config(config_class, flags, **naming)
  parts, unknown_then = [], []
  for name in recorded.remake_settings():
    value = getattr(recorded, name)
    if name in _RUN_NAMING or value == getattr(defaults, name):
      continue
    if isinstance(value, bool):
      part = f"--{'' if value else 'no'}{name}"
    elif isinstance(value, tuple):
      part = f"--{name}={','.join(str(v) for v in value)}"
    else:
      part = f"--{name}={value}"
    parts.append(part)
    if name not in flags:
      unknown_then.append(f"--{name}")
  return " ".join(parts), ", ".join(unknown_then)


def _code(commit: Optional[str]) -> str:
  """Where a run's code is: its short commit, marked if the tree had uncommitted changes."""
  if not commit:
    return "unknown code"
  return f"code `{commit[:7]}`" + (" with uncommitted changes" if commit.endswith("-dirty")
                                   else "")


def _start_commit(record: Mapping) -> str:
  """The commit a run started at (the one it ended at if it recorded none), without "-dirty";
  "" if it recorded neither."""
  for key in ("git_commit_at_start", "git_commit"):
    value = record.get(key)
    if isinstance(value, str) and value:
      return value.removesuffix("-dirty")
  return ""


def _history_place(record: Mapping, history: Mapping[str, int]) -> tuple[bool, int]:
  """Where the code a run started at stands in `history`: (False, position), or (True, 0) for a
  commit it does not hold, so that such runs sort last."""
  position = history.get(_start_commit(record))
  return (position is None, position or 0)


def _span(values: Sequence[int]) -> str:
  """Seeds as run_table.sh takes them: "0 1 2"."""
  return " ".join(str(v) for v in sorted(set(values)))


def reproduction_commands(runs: pd.DataFrame, config_class: type,
                          history: Optional[Mapping[str, int]] = None) -> list[str]:
  """Markdown lines: the command that remakes each group of `runs` (rows with a results.json
  `path`), read from the settings each run recorded, so the table says exactly how every number
  was made. Runs of a run_table.sh layout sharing root, datasets, seeds and settings make one
  run_table.sh line if they were also made at the same code commit, which the line names (a
  later commit may draw other random numbers); any other run gets its own
  `python -m <benchmark>.main` line after them. Each kind comes in the order its runs' code was
  written (the commit a run started at, placed by `history`, by default
  `git_history_positions`; commits it lacks last, by hash): run top to bottom, the table lines
  train a dataset's and seed's shared checkpoint at the code that trained it (a refinement
  added at later code must not train its VOGN first). Single runs share no checkpoint."""
  history = git_history_positions() if history is None else history
  seeds_of: dict[tuple, set[int]] = {}
  singles = []
  # Per line's code: (commit unknown, place in history) of the earliest-written run's start.
  times: dict[str, tuple[bool, int]] = {}
  for path in sorted(set(runs.path)):
    with open(path) as stream:
      record = json.load(stream)
    extra, unknown_then = _flags_beyond_defaults(record, config_class)
    code = _code(record.get("git_commit")) + (
        f", which had no {unknown_then}" if unknown_then else "")
    started = _history_place(record, history)
    times[code] = min(times.get(code, started), started)
    match = _TABLE_LAYOUT.match(path.replace(os.sep, "/"))
    if match is None or (match["benchmark"], match["dataset"], match["method"],
                         int(match["seed"])) != (record["benchmark"], record["dataset"],
                                                 record["method"], int(record["seed"])):
      singles.append((times[code], f"- `python -m {record['benchmark']}.main "
                      f"--dataset={record['dataset']} --method={record['method']} "
                      f"--seed={record['seed']} " + (f"{extra} " if extra else "")
                      + f"--output_dir={os.path.dirname(path)}` ({code})"))
      continue
    key = (match["root"], match["benchmark"], code, record["method"], extra, record["dataset"])
    seeds_of.setdefault(key, set()).add(int(record["seed"]))
  datasets_of: dict[tuple, list[str]] = {}
  for (root, benchmark, code, method, extra, dataset), seeds in seeds_of.items():
    datasets_of.setdefault((root, benchmark, code, method, extra, _span(seeds)),
                           []).append(dataset)
  merged: dict[tuple, list[str]] = {}
  for (root, benchmark, code, method, extra, seeds), datasets in datasets_of.items():
    key = (root, benchmark, code, " ".join(sorted(datasets)), seeds, extra)
    merged.setdefault(key, []).append(method)
  lines = []
  for (root, benchmark, code, datasets, seeds, extra), methods in sorted(merged.items()):
    lines.append((times[code], f"- `common/run_table.sh --benchmark={benchmark} "
                  f"--output_root={root} --datasets=\"{datasets}\" --seeds=\"{seeds}\" "
                  f"--methods=\"{' '.join(sorted(methods))}\""
                  + (f" -- {extra}" if extra else "") + f"` ({code})"))
  # Stable sorts: lines of one place keep the order above.
  return [line for _, line in sorted(lines, key=lambda pair: pair[0])
          + sorted(singles, key=lambda pair: pair[0])]
