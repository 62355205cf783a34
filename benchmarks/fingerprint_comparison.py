"""Two numerical fingerprints compared metric by metric (`numerics_fingerprint --compare`).

Every metric of every run of both, with the relative difference |a - b| / max(|a|, |b|)
("identical" when bit-equal; a per-step series is one row, its largest difference), as a
Markdown table; the rows beyond a tolerance, and a run or metric on one side only, are what
fails. Recorded settings that differ are listed beside them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping


@dataclasses.dataclass
class Row:
  """One metric of one run in a comparison."""
  run: str
  metric: str
  before: Any
  after: Any
  difference: float          # relative; 0 for bit-equal, inf for a side that is missing
  note: str = ""


def relative_difference(before: Any, after: Any) -> float:
  """|a - b| / max(|a|, |b|), elementwise maximum for series; 0 for bit-equal values (NaN equals
  NaN), inf for series of other lengths or a NaN against a number."""
  if isinstance(before, list) or isinstance(after, list):
    if not (isinstance(before, list) and isinstance(after, list)) or len(before) != len(after):
      return math.inf
    return max((relative_difference(b, a) for b, a in zip(before, after)), default=0.0)
  if before == after or (math.isnan(before) and math.isnan(after)):
    return 0.0
  if math.isnan(before) or math.isnan(after) or math.isinf(before) or math.isinf(after):
    return math.inf
  return abs(before - after) / max(abs(before), abs(after))


def compare(before: Mapping, after: Mapping) -> tuple[list[Row], list[str]]:
  """Every metric of every run of two fingerprints, and the recorded settings that differ."""
  rows, setting_notes = [], []
  for key in list(before["runs"]) + [k for k in after["runs"] if k not in before["runs"]]:
    old, new = before["runs"].get(key), after["runs"].get(key)
    if old is None or new is None or "error" in old or "error" in new:
      side = ("before" if old is None else "after" if new is None else
              f"before ({old['error']})" if "error" in old else f"after ({new['error']})")
      rows.append(Row(key, "(run)", None, None, math.inf, f"missing {side}"))
      continue
    old_metrics, new_metrics = old["metrics"], new["metrics"]
    for metric in list(old_metrics) + [m for m in new_metrics if m not in old_metrics]:
      if metric not in old_metrics or metric not in new_metrics:
        side = "before" if metric not in old_metrics else "after"
        rows.append(Row(key, metric, old_metrics.get(metric), new_metrics.get(metric), math.inf,
                        f"missing {side}"))
        continue
      rows.append(Row(key, metric, old_metrics[metric], new_metrics[metric],
                      relative_difference(old_metrics[metric], new_metrics[metric])))
    old_flags, new_flags = old.get("flags", {}), new.get("flags", {})
    for name in list(old_flags) + [n for n in new_flags if n not in old_flags]:
      if old_flags.get(name, "(absent)") != new_flags.get(name, "(absent)"):
        setting_notes.append(f"{key}: --{name} {old_flags.get(name, '(absent)')!r} -> "
                             f"{new_flags.get(name, '(absent)')!r}")
  return rows, setting_notes


def _shown(value: Any) -> str:
  if value is None:
    return "-"
  if isinstance(value, list):
    return f"{len(value)} values, last {_shown(value[-1]) if value else '-'}"
  return repr(value)


def comparison_table(before: Mapping, after: Mapping, tolerance: float) -> tuple[str, list[Row]]:
  """The Markdown comparison and the rows beyond `tolerance` (every row missing a side)."""
  rows, setting_notes = compare(before, after)
  failing = [row for row in rows if row.difference > tolerance]
  identical = sum(row.difference == 0 for row in rows)
  lines = [f"Before: {before.get('git_commit')} ({before.get('date')}); after: "
           f"{after.get('git_commit')} ({after.get('date')})", "",
           f"{len(rows)} metrics of {len({row.run for row in rows})} runs: {identical} identical, "
           f"{len(failing)} beyond the tolerance {tolerance:g}", "",
           "| run | metric | before | after | relative difference |", "|---|---|---|---|---|"]
  for row in rows:
    difference = ("identical" if row.difference == 0 else row.note or f"{row.difference:.3g}")
    lines.append(f"| {row.run} | {row.metric} | {_shown(row.before)} | {_shown(row.after)} | "
                 f"{difference} |")
  if setting_notes:
    lines += ["", "Recorded settings that differ (not failing):", ""]
    lines += [f"- {note}" for note in setting_notes]
  return "\n".join(lines) + "\n", failing


def load_fingerprint(path: str) -> dict:
  """A fingerprint file written by --output; RuntimeError (one line) if it is not one."""
  try:
    with open(path) as handle:
      payload = json.load(handle)
  except (OSError, ValueError) as error:
    raise RuntimeError(f"cannot read the fingerprint {path}: {error}") from None
  if not isinstance(payload, dict) or not isinstance(payload.get("runs"), dict):
    raise RuntimeError(f"{path} is not a fingerprint (no 'runs'); allowed: a file written by "
                       "--output")
  return payload
