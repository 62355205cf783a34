"""Reading what the tables and the report compare: our runs' results.json and the paper's tables.

The one rule for which runs count: every results.json under `results_dir`, except those with a
folder named `ablations`, `related` or `smoke` on their path below `results_dir`. Ablations vary a
setting and related methods (VOGN, ...) are not the paper's: both have their own tables; smoke
runs use synthetic data and are not results. The rule looks
only below `results_dir`, so pointing `results_dir` at an ablation's folder (say
`results/ablations/per_batch_weight_noise/uci`) reads that ablation, and `load_evidence` reads the
folders a benchmark names as its evidence (Table 3's row groups), wherever they lie.

Everything reads through `load_runs`: `report.tables` (and the benchmark table modules built on
it, `report.uci_table` and the like), and the report, which lays out Tables 1-3 by calling those
modules.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, NamedTuple, Optional, Sequence

import pandas as pd

from common.results import RESULTS_FILENAME

EXCLUDED_DIRS = ("ablations", "related", "smoke")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The paper's Tables 1-3 (and the related work's tables we compare with), beside this module.
DEFAULT_PAPER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper_tables")


class LoadedRun(NamedTuple):
  """A results.json: its path (under `results_dir`, as given) and its parsed contents."""
  path: str
  payload: dict[str, Any]


def is_excluded(path: str, results_dir: str) -> bool:
  """Whether `path` (a file under `results_dir`) lies in an excluded folder below it."""
  return bool(set(EXCLUDED_DIRS) & set(os.path.relpath(path, results_dir).split(os.sep)))


def find_files(results_dir: str, pattern: str) -> list[str]:
  """Sorted paths matching `pattern` at any depth under `results_dir`, minus excluded folders."""
  paths = glob.glob(os.path.join(results_dir, "**", pattern), recursive=True)
  return sorted(path for path in paths if not is_excluded(path, results_dir))


def load_runs(results_dir: str, benchmark: Optional[str] = None) -> list[LoadedRun]:
  """Every counted results.json under `results_dir` (of `benchmark` only, if given), by path."""
  runs = []
  for path in find_files(results_dir, RESULTS_FILENAME):
    with open(path) as stream:
      payload = json.load(stream)
    if benchmark is None or payload.get("benchmark") == benchmark:
      runs.append(LoadedRun(path, payload))
  return runs


def _depth(folder: str) -> int:
  return len(os.path.normpath(folder).split(os.sep))


def _is_within(path: str, folder: str) -> bool:
  relative = os.path.relpath(path, folder)
  return relative != os.pardir and not relative.startswith(os.pardir + os.sep)


def load_evidence(results_dir: str, folders: Sequence[str],
                  benchmark: Optional[str] = None) -> dict[str, list[LoadedRun]]:
  """{folder: its runs of `benchmark`} for each named folder (relative to `results_dir`).

  A named folder is read even below `ablations/`: the exclusion rule applies only below it. A run
  under two named folders (one inside the other) belongs to the deeper one only. A folder that does
  not exist has no runs.
  """
  evidence: dict[str, list[LoadedRun]] = {folder: [] for folder in folders}
  by_depth = sorted(folders, key=_depth, reverse=True)
  for folder in folders:
    for run in load_runs(os.path.join(results_dir, folder), benchmark):
      owner = next(f for f in by_depth if _is_within(run.path, os.path.join(results_dir, f)))
      if owner == folder:
        evidence[folder].append(run)
  return evidence


def load_paper_table(name: str, paper_dir: Optional[str] = None) -> pd.DataFrame:
  """The paper's table `name` (a CSV under `paper_dir`, $REFINED_VI_PAPER_DIR or the default)."""
  paper_dir = paper_dir or os.environ.get("REFINED_VI_PAPER_DIR") or DEFAULT_PAPER_DIR
  path = os.path.join(paper_dir, name)
  if not os.path.exists(path):
    raise FileNotFoundError(f"paper table {path} not found "
                            "(set --paper_dir or REFINED_VI_PAPER_DIR)")
  return pd.read_csv(path)
