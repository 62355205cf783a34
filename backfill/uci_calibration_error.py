"""One-off: adds metrics.calibration_error to committed UCI runs from bit-identical reruns.

  python -m backfill.uci_calibration_error --rerun_root=/path/to/rerun \
      results/uci results/related/uci results/related/vogn_gauss_newton/uci

uci/main.py records calibration_error (the regression ECE, uci/regression.py) since 2b1ac4a; the
runs behind results/related/uci_table.md predate it. The UCI runs are deterministic on CPU (a rerun
at the same code gives every number bit for bit), so this script trusts a rerun only as far as it
can check it: it reruns nothing itself, but reads the run at the same path under --rerun_root (made
by a command at the end of uci_table.md with its --output_root moved under that root, at the code
commit the command names, with 2b1ac4a's uci/regression.py applied if that commit is older), and
copies calibration_error in only if the rerun was made with the same settings (Config.differences)
and records every metric of the run with an equal value. The copy carries a "backfilled" note
naming this script, its commit and the rerun's, so nobody mistakes it for a recorded value. A run
without a rerun is left alone and counted; a rerun that disagrees leaves the file alone, is named,
and exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Union

from common.config import recorded_config
from common.results import backfill_note, write_json_atomically
from report import uci_table
from uci.config import UciConfig

SCRIPT = "backfill/uci_calibration_error.py"
METRIC = "calibration_error"


def disagreements(run: dict, rerun: dict) -> list[str]:
  """What keeps `rerun` from vouching for `run`: settings that shape results and differ, and
  metrics of the run the rerun lacks or gives other values (timings and checkpoint bookkeeping
  aside)."""
  settings = recorded_config(UciConfig, rerun["flags"], method=rerun["method"],
                             dataset=rerun["dataset"])
  problems = [f"--{name}" for name in settings.differences(run["flags"])]
  for name, value in run["metrics"].items():
    if name.endswith("_resumed_from_step"):
      continue
    if name not in rerun["metrics"]:
      problems.append(f"{name} (the rerun does not record it)")
    elif rerun["metrics"][name] != value:
      problems.append(f"{name} {value!r} (rerun: {rerun['metrics'][name]!r})")
  return problems


def backfill(path: str, rerun_path: str, note: str) -> Union[str, list[str]]:
  """Adds the rerun's calibration_error and the note to one run: "added", "recorded" (the run
  has the metric), "no rerun", or why the rerun cannot vouch for it."""
  with open(path) as stream:
    run = json.load(stream)
  if METRIC in run["metrics"]:
    return "recorded"
  if not os.path.exists(rerun_path):
    return "no rerun"
  with open(rerun_path) as stream:
    rerun = json.load(stream)
  problems = disagreements(run, rerun)
  if METRIC not in rerun["metrics"]:
    problems.append(f"the rerun records no {METRIC}")
  if problems:
    return problems
  run["metrics"][METRIC] = rerun["metrics"][METRIC]
  run["backfilled"] = {**run.get("backfilled", {}),
                       f"metrics.{METRIC}": f"{note} from a rerun at {rerun['git_commit']}"}
  write_json_atomically(path, run)
  return "added"


def main(argv: Optional[list[str]] = None) -> None:
  """Backfills every run under the roots (paths as committed, relative to the repository) and
  reports the counts; exits 1 naming each refused rerun."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rerun_root", required=True,
                      help="The folder the reruns' output roots are under, paths as committed.")
  parser.add_argument("roots", nargs="+", help="Folders of committed UCI runs (relative paths).")
  args = parser.parse_args(argv)
  for root in args.roots:
    if os.path.isabs(root) or not os.path.isdir(root):
      parser.error(f"{root}: allowed: a folder of committed runs, relative to the repository "
                   "root (the rerun's path is the same under --rerun_root)")
  note = backfill_note(SCRIPT)
  counts = {"added": 0, "recorded": 0, "no rerun": 0}
  refused = []
  for root in args.roots:
    for path in sorted(uci_table.load_runs(root).path):
      outcome = backfill(path, os.path.join(args.rerun_root, os.path.relpath(path)), note)
      if isinstance(outcome, list):
        refused.append(f"{path}: {'; '.join(outcome)}")
      else:
        counts[outcome] += 1
  print(f"{METRIC}: " + ", ".join(f"{count} {outcome}" for outcome, count in counts.items())
        + f", {len(refused)} refused ({note})")
  if refused:
    sys.exit("\n".join(refused))


if __name__ == "__main__":
  main()
