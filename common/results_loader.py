"""Reading what the tables and the report compare: our runs' results.json and the paper's tables.

The one rule for which runs count: every results.json under `results_dir`, except those with a
folder named `ablations`, `related` or `smoke` on their path below `results_dir`. Ablations vary a
setting and related methods (VOGN, ...) are not the paper's: both have their own tables; smoke
runs use synthetic data and are not results. The rule looks
only below `results_dir`, so pointing `results_dir` at an ablation's folder (say
`results/ablations/per_batch_weight_noise/uci`) reads that ablation.

Everything reads through `load_runs`: `common.tables` (and the benchmarks' `table` modules built on
it), and the report, which lays out Tables 1 and 2 by calling those `table` modules.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, NamedTuple, Optional

import pandas as pd

from common.results import RESULTS_FILENAME

EXCLUDED_DIRS = ("ablations", "related", "smoke")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PAPER_DIR = os.path.join(REPOSITORY, "common", "paper_tables")   # the paper's Tables 1-3


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


def load_paper_table(name: str, paper_dir: Optional[str] = None) -> pd.DataFrame:
  """The paper's table `name` (a CSV under `paper_dir`, $REFINED_VI_PAPER_DIR or the default)."""
  paper_dir = paper_dir or os.environ.get("REFINED_VI_PAPER_DIR") or DEFAULT_PAPER_DIR
  path = os.path.join(paper_dir, name)
  if not os.path.exists(path):
    raise FileNotFoundError(f"paper table {path} not found "
                            "(set --paper_dir or REFINED_VI_PAPER_DIR)")
  return pd.read_csv(path)
