"""Where an agent's regret comes from: poisonous mushrooms eaten or edible ones passed, over the
whole run and in its second half, per seed, from the regret records of bandit runs.

A step's expected regret is 15 for eating a poisonous mushroom (the omniscient agent passes:
0 against the eat reward's expectation of -15), 5 for passing an edible one and 0 otherwise, so
the record's actions and regrets say which mistake each step made. Cumulative regret alone
cannot tell an agent that keeps exploring from one that stopped eating (every edible mushroom
passed at 5 a step); this table can. A second table follows each seed through the quarters of
its run: the share of edible and of poisonous mushrooms it ate, and the mean predicted reward of
eating minus passing it chose from, per class (records made before that was kept: blank). An
agent that cannot tell the classes apart shows as equal eat rates and gaps for both; one that
rules eating out, as negative gaps for edible mushrooms too.

  python -m report.bandit_regret_sources --run_dirs=results/bandits/mushroom/vi_ts,... \
      --output_dir=results/bandits/mushroom
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

from bandits import mushroom
from bandits.figure import records_in
from common.results import write_json_atomically, write_text_atomically

# A seed "stopped eating" if it ate fewer than this share of the mushrooms of its second half (the
# omniscient agent eats the edible ones: 52 % of the data set).
STOPPED_EATING_BELOW = 0.05
TABLE_FILENAME = "regret_sources.md"
JSON_FILENAME = "regret_sources.json"
POISONOUS_EATEN_REGRET = mushroom.REWARD_PASS - mushroom.EXPECTED_REWARD_POISONOUS   # 15
EDIBLE_PASSED_REGRET = mushroom.REWARD_EDIBLE - mushroom.REWARD_PASS                # 5


def mistakes(actions: np.ndarray, expected_regret: np.ndarray) -> dict[str, int]:
  """Counts of poisonous mushrooms eaten and edible ones passed, and of mushrooms eaten, in one
  seed's run of one line (1-D arrays over steps); ValueError if a regret is none of 0, 5, 15."""
  eaten = actions == mushroom.EAT
  poisonous_eaten = eaten & np.isclose(expected_regret, POISONOUS_EATEN_REGRET)
  edible_passed = ~eaten & np.isclose(expected_regret, EDIBLE_PASSED_REGRET)
  correct = np.isclose(expected_regret, 0.0)
  if not np.all(poisonous_eaten | edible_passed | correct):
    step = int(np.argmin(poisonous_eaten | edible_passed | correct))
    raise ValueError(f"step {step + 1}: expected regret {expected_regret[step]} for action "
                     f"{actions[step]}; allowed: 0, {EDIBLE_PASSED_REGRET:g} (edible passed) or "
                     f"{POISONOUS_EATEN_REGRET:g} (poisonous eaten)")
  return {"poisonous_eaten": int(poisonous_eaten.sum()), "edible_passed": int(edible_passed.sum()),
          "eaten": int(eaten.sum()), "steps": int(actions.size)}


def regret_sources(records: Sequence, second_half_from: Optional[int] = None) -> list[dict]:
  """One row per line and seed: its mistakes over the whole run and from step
  `second_half_from` (0-based; default: half the horizon) on, with their regret. ValueError if
  the records' horizons differ (their second halves would not be comparable) or a regret is not
  one of the environment's."""
  horizons = sorted({record.actions.shape[-1] for record in records})
  if len(horizons) > 1:
    raise ValueError(f"the runs' horizons differ ({', '.join(map(str, horizons))} steps); "
                     "allowed: runs of one horizon")
  rows = []
  for record in records:
    start = horizons[0] // 2 if second_half_from is None else second_half_from
    for line_index, line in enumerate(record.line_names):
      for seed_index, seed in enumerate(record.seeds):
        actions = record.actions[seed_index, line_index]
        regret = record.expected_regret[seed_index, line_index]
        try:
          whole = mistakes(actions, regret)
        except ValueError as error:
          raise ValueError(f"{line}, seed {seed}: {error}") from None
        row = {"line": line, "seed": int(seed), "cumulative_regret": float(regret.sum()),
               "whole": whole, "second_half": mistakes(actions[start:], regret[start:]),
               "second_half_from_step": start + 1}
        for part in ("whole", "second_half"):
          counts = row[part]
          counts["regret"] = float(POISONOUS_EATEN_REGRET * counts["poisonous_eaten"]
                                   + EDIBLE_PASSED_REGRET * counts["edible_passed"])
        rows.append(row)
  return rows


def mushroom_classes(actions: np.ndarray, expected_regret: np.ndarray) -> np.ndarray:
  """Whether each step's mushroom was edible, from its action and expected regret: eaten at 0 or
  passed at 5 is edible, eaten at 15 or passed at 0 is poisonous."""
  eaten = actions == mushroom.EAT
  return np.where(eaten, np.isclose(expected_regret, 0.0),
                  np.isclose(expected_regret, EDIBLE_PASSED_REGRET))


def quarter_diagnostics(records: Sequence, parts: int = 4) -> list[dict]:
  """One row per line, seed and `parts`-th of the run: how many edible and poisonous mushrooms it
  met, the share of each it ate, and the mean predicted eat-minus-pass gap per class (None where
  the record holds no gaps or the class did not occur)."""
  rows = []
  for record in records:
    horizon = record.actions.shape[-1]
    bounds = np.linspace(0, horizon, parts + 1).round().astype(int)
    for line_index, line in enumerate(record.line_names):
      for seed_index, seed in enumerate(record.seeds):
        actions = record.actions[seed_index, line_index]
        edible = mushroom_classes(actions, record.expected_regret[seed_index, line_index])
        gaps = (None if record.predicted_gap is None
                else record.predicted_gap[seed_index, line_index])
        for part, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]), start=1):
          row = {"line": line, "seed": int(seed), "part": part, "first_step": int(start) + 1,
                 "last_step": int(stop)}
          for name, members in (("edible", edible[start:stop]),
                                ("poisonous", ~edible[start:stop])):
            count = int(members.sum())
            eaten = actions[start:stop][members] == mushroom.EAT
            row[name] = {
                "count": count, "eat_rate": float(eaten.mean()) if count else None,
                "mean_gap": (float(gaps[start:stop][members].mean())
                             if count and gaps is not None else None)}
          rows.append(row)
  return rows


def _cell(value: Optional[float], form: str) -> str:
  return "" if value is None else format(value, form)


def quarter_table(rows: Sequence[dict]) -> str:
  """Markdown of `quarter_diagnostics` rows."""
  lines = ["| agent | seed | steps | edible eaten | poisonous eaten | eat − pass, edible "
           "| eat − pass, poisonous |", "|" + "---|" * 7]
  for row in rows:
    edible, poisonous = row["edible"], row["poisonous"]
    lines.append(
        f"| {row['line']} | {row['seed']} | {row['first_step']:,}-{row['last_step']:,} "
        f"| {_cell(edible['eat_rate'], '.0%')} | {_cell(poisonous['eat_rate'], '.0%')} "
        f"| {_cell(edible['mean_gap'], '+.2f')} | {_cell(poisonous['mean_gap'], '+.2f')} |")
  return "\n".join(lines) + "\n"


def regret_sources_table(rows: Sequence[dict]) -> str:
  """Markdown of `regret_sources` rows."""
  first = rows[0]["second_half_from_step"]
  lines = ["| agent | seed | cumulative regret | poisonous eaten (regret) | edible passed (regret) "
           f"| eaten | from step {first:,}: poisonous eaten | edible passed | eaten "
           "| regret per step |", "|" + "---|" * 10]
  for row in rows:
    whole, late = row["whole"], row["second_half"]
    poisonous, edible = whole["poisonous_eaten"], whole["edible_passed"]
    lines.append(
        f"| {row['line']} | {row['seed']} | {row['cumulative_regret']:,.0f} "
        f"| {poisonous:,} ({POISONOUS_EATEN_REGRET * poisonous:,.0f}) "
        f"| {edible:,} ({EDIBLE_PASSED_REGRET * edible:,.0f}) "
        f"| {whole['eaten'] / whole['steps']:.0%} | {late['poisonous_eaten']:,} "
        f"| {late['edible_passed']:,} | {late['eaten'] / late['steps']:.0%} "
        f"| {late['regret'] / late['steps']:.2f} |")
  return "\n".join(lines) + "\n"


def line_summary_table(rows: Sequence[dict]) -> str:
  """Markdown, one row per line: its mistakes averaged over its seeds, its second half's regret
  per step, and how many of its seeds stopped eating (ate < 5 % in the second half)."""
  first = rows[0]["second_half_from_step"]
  lines = [f"| agent | seeds | poisonous eaten | edible passed | from step {first:,}: regret per "
           f"step | seeds that stopped eating (from step {first:,}) |", "|" + "---|" * 6]
  for line in dict.fromkeys(row["line"] for row in rows):
    own = [row for row in rows if row["line"] == line]
    stopped = [row["seed"] for row in own if row["second_half"]["eaten"]
               < STOPPED_EATING_BELOW * row["second_half"]["steps"]]
    late = [row["second_half"]["regret"] / row["second_half"]["steps"] for row in own]
    lines.append(
        f"| {line} | {','.join(str(row['seed']) for row in own)} "
        f"| {np.mean([row['whole']['poisonous_eaten'] for row in own]):,.0f} "
        f"| {np.mean([row['whole']['edible_passed'] for row in own]):,.0f} "
        f"| {np.mean(late):.2f} | {len(stopped)} of {len(own)}"
        f"{' (' + ','.join(map(str, stopped)) + ')' if stopped else ''} |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  from runner.cli import UsageError  # pylint: disable=import-outside-toplevel
  from runner.output_directory import prepare_output_dir  # pylint: disable=import-outside-toplevel
  options = flags.FLAGS
  missing = [run_dir for run_dir in options.run_dirs if not os.path.isdir(run_dir)]
  if missing:
    raise UsageError(f"--run_dirs: {missing[0]} is not a directory; allowed: output_dirs of "
                     "bandits.main")
  try:
    records = records_in(options.run_dirs)
  except ValueError as error:
    raise UsageError(str(error)) from error
  if not records:
    raise UsageError(f"no regret_<agent>.npz in --run_dirs={','.join(options.run_dirs)}")
  horizons = sorted({record.actions.shape[-1] for record in records})
  if len(horizons) > 1:
    raise UsageError(f"--run_dirs: the runs' horizons differ ({', '.join(map(str, horizons))} "
                     "steps); allowed: runs of one horizon")
  if options.second_half_from is not None and not 0 <= options.second_half_from < horizons[0]:
    raise UsageError(
        f"--second_half_from={options.second_half_from} must be in [0, {horizons[0]})")
  rows = regret_sources(records, options.second_half_from)   # a corrupt record: exit 1
  quarters = quarter_diagnostics(records)
  table = (regret_sources_table(rows) + "\n" + line_summary_table(rows)
           + "\nBy quarter of the run: the share of each class eaten, and the mean predicted "
           "reward of eating minus passing the choice was made from.\n\n" + quarter_table(quarters))
  prepare_output_dir(options.output_dir)
  write_json_atomically(os.path.join(options.output_dir, JSON_FILENAME),
                        {"rows": rows, "quarters": quarters, "run_dirs": list(options.run_dirs)})
  write_text_atomically(os.path.join(options.output_dir, TABLE_FILENAME), table)
  print(table, end="")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from runner import cli
  absl_flags.DEFINE_list("run_dirs", None, "Bandit run directories (output_dir of bandits.main).",
                         required=True)
  absl_flags.DEFINE_string("output_dir", None, "Where regret_sources.md and .json go.",
                           required=True)
  absl_flags.DEFINE_integer("second_half_from", None,
                            "Step (0-based) where the late part starts; default half the horizon.")
  cli.run(main)
