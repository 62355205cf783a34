"""One-off: adds metrics.target_std to UCI results.json files written before the binary recorded it.

  python -m backfill.uci_target_std --data_dir=$REFINED_VI_DATA_DIR/uci \
      results/uci results/ablations

report/uci_table.py converts ELBOs to original units with metrics["target_std"], the std of the
training targets the run standardised with. For runs that lack it this recomputes it as uci/main.py
does (the run's dataset, split and seed; data from --data_dir only, never downloaded), checks the
split against the recorded num_train and num_test, and adds it with a top-level "backfilled" note
naming the commit and this script, so nobody mistakes it for a recorded value. Files that already
have target_std are left alone; the rest are rewritten by the writer the binaries use, so the only
change is the two added keys.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from typing import Optional

from common.results import RESULTS_FILENAME, backfill_note, write_json_atomically
from uci import data

SCRIPT = "backfill/uci_target_std.py"


def target_std(run_flags: dict, data_dir: str, cache: dict) -> tuple[float, int, int]:
  """The training targets' std, train size and test size of the run with these flags."""
  name = run_flags["dataset"]
  if name not in cache:
    features, targets = data.load(name, data_dir, download_allowed=False)
    num_splits = data.num_standard_splits(name, data_dir, download_allowed=False)
    cache[name] = features, targets, num_splits
  features, targets, num_splits = cache[name]
  split = data.prepare(features, targets, run_flags["split"], run_flags["seed"], num_splits)
  return split.target_std, len(split.y_train), len(split.y_test)


def backfill(path: str, run: dict, data_dir: str, note: str, cache: dict) -> bool:
  """Adds target_std and the note to one UCI run's results.json; False if it had target_std."""
  if "target_std" in run["metrics"]:
    return False
  std, num_train, num_test = target_std(run["flags"], data_dir, cache)
  recorded = (run["metrics"].get("num_train"), run["metrics"].get("num_test"))
  if recorded != (num_train, num_test):
    raise ValueError(f"{path}: the recomputed split has {num_train}/{num_test} train/test rows, "
                     f"the run recorded {recorded}")
  run["metrics"]["target_std"] = std
  run["backfilled"] = {"metrics.target_std": note}
  write_json_atomically(path, run)
  return True


def main(argv: Optional[list[str]] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data_dir", required=True, help="The offline UCI copy (no downloads).")
  parser.add_argument("roots", nargs="+", help="Directories searched for UCI results.json files.")
  args = parser.parse_args(argv)
  note = backfill_note(SCRIPT)
  cache, added, present = {}, 0, 0
  for root in args.roots:
    for path in sorted(glob.glob(os.path.join(root, "**", RESULTS_FILENAME), recursive=True)):
      with open(path) as stream:
        run = json.load(stream)
      if run.get("benchmark") != "uci":
        continue
      if backfill(path, run, args.data_dir, note, cache):
        added += 1
      else:
        present += 1
  print(f"added target_std to {added} UCI results.json files; {present} had it already ({note})")


if __name__ == "__main__":
  main()
