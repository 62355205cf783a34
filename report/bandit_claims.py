"""Figure 5's claims held to the runs, paired over seeds (seed s shows every agent the same
mushrooms, so a per-seed difference removes the spread between streams).

The paper (Section 4.3) claims: the refined agent "has lower regret throughout" than mean-field
Thompson sampling; ε-greedy does well "until about 3000 iterations" and is then "overtaken by
Thompson sampling". Tested here as:

1. refined_ts below vi_ts at every 1,000 steps: the mean over seeds of refined_ts − vi_ts
   cumulative expected regret is negative at each (with its standard error and the seeds won);
2. each Thompson sampler below the best ε-greedy line (the lowest mean final regret) at the
   last step;
3. the crossing near step 3,000: for each Thompson sampler, the first step from which its mean
   cumulative regret stays below the best ε-greedy line's to the end, after being above it;
   "near" is within 1,000 steps of 3,000.

  python -m report.bandit_claims --run_dirs=results/bandits/mushroom/vi_ts,...
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from report.claims import Claim, claims_table, seed_difference, signed

THOMPSON_LINES = ("refined_ts", "vi_ts")
EPS_GREEDY_PREFIX = "eps_greedy"
CHECK_INTERVAL = 1000
PAPER_CROSSING, CROSSING_TOLERANCE = 3000, 1000


@dataclasses.dataclass(frozen=True)
class PairedDifference:
  """`first` − `second` cumulative expected regret at `step`, over the seeds both lines have."""

  first: str
  second: str
  step: int
  seeds: tuple[int, ...]
  mean: float
  standard_error: float   # NaN for one seed
  first_won: int          # seeds where `first` had the lower regret


def curves_by_line(records: Sequence) -> dict[str, dict[int, np.ndarray]]:
  """{line name: {seed: cumulative expected regret per step}} over `records` (RegretRecord)."""
  curves: dict[str, dict[int, np.ndarray]] = {}
  for record in records:
    cumulative = record.cumulative()
    for index, name in enumerate(record.line_names):
      for row, seed in enumerate(record.seeds):
        curves.setdefault(name, {})[int(seed)] = cumulative[row, index]
  return curves


def paired_difference(curves: dict[str, dict[int, np.ndarray]], first: str, second: str,
                      step: int) -> PairedDifference:
  """`first` − `second` at `step` (1-based) on the seeds both have; ValueError if none."""
  if not set(curves[first]) & set(curves[second]):
    raise ValueError(f"{first} and {second} share no seed; allowed: lines run on the same seeds")
  difference = seed_difference({seed: curve[step - 1] for seed, curve in curves[first].items()},
                               {seed: curve[step - 1] for seed, curve in curves[second].items()})
  lower = sum(curves[first][seed][step - 1] < curves[second][seed][step - 1]
              for seed in difference.seeds)
  return PairedDifference(first, second, step, difference.seeds, difference.mean,
                          difference.standard_error, int(lower))


def _mean_curve(curves: dict[str, dict[int, np.ndarray]], name: str,
                seeds: Sequence[int]) -> np.ndarray:
  return np.mean([curves[name][seed] for seed in seeds], axis=0)


def crossing_step(curves: dict[str, dict[int, np.ndarray]], thompson: str, greedy: str
                  ) -> Optional[int]:
  """The first step (1-based) from which `thompson`'s mean cumulative regret stays below
  `greedy`'s to the end, on their common seeds; None if it is not below at the end, 1 if it was
  below throughout (no crossing)."""
  seeds = sorted(set(curves[thompson]) & set(curves[greedy]))
  below = _mean_curve(curves, thompson, seeds) < _mean_curve(curves, greedy, seeds)
  if not below[-1]:
    return None
  not_below = np.flatnonzero(~below)
  return 1 if not len(not_below) else int(not_below[-1]) + 2


def _difference_text(difference: PairedDifference) -> str:
  error = ("" if np.isnan(difference.standard_error)
           else f" ± {difference.standard_error:,.0f}")
  return (f"{signed(difference.mean, ',.0f')}{error} at {difference.step:,} "
          f"({difference.first} won {difference.first_won} of {len(difference.seeds)})")


def claims(records: Sequence) -> list[Claim]:
  """The paper's three Figure 5 claims against `records`."""
  curves = curves_by_line(records)
  horizon = min(len(curve) for line in curves.values() for curve in line.values())
  results = []
  statement = "refined_ts below vi_ts at every 1,000 steps"
  if all(name in curves for name in THOMPSON_LINES) and horizon >= CHECK_INTERVAL:
    differences = [paired_difference(curves, "refined_ts", "vi_ts", step)
                   for step in range(CHECK_INTERVAL, horizon + 1, CHECK_INTERVAL)]
    clear = sum(d.mean + 2 * d.standard_error < 0 for d in differences)
    results.append(Claim(statement, all(d.mean < 0 for d in differences),
                         "refined_ts − vi_ts: " + "; ".join(map(_difference_text, differences))
                         + f"; below by more than 2 standard errors at {clear} of "
                         f"{len(differences)}"))
  else:
    results.append(Claim(statement, None, "needs refined_ts and vi_ts over ≥ 1,000 steps"))
  greedy_lines = [name for name in curves if name.startswith(EPS_GREEDY_PREFIX)]
  thompson_lines = [name for name in THOMPSON_LINES if name in curves]
  if not greedy_lines or not thompson_lines:
    missing = "needs ε-greedy and a Thompson sampler"
    return results + [Claim("Thompson sampling below the best ε-greedy at the end", None, missing),
                      Claim("Thompson sampling overtakes ε-greedy near step 3,000", None, missing)]
  best = min(greedy_lines, key=lambda name: np.mean([c[horizon - 1]
                                                     for c in curves[name].values()]))
  finals = [paired_difference(curves, name, best, horizon) for name in thompson_lines]
  results.append(Claim(f"Thompson sampling below the best ε-greedy ({best}) at {horizon:,}",
                       all(d.mean < 0 for d in finals),
                       "; ".join(f"{d.first} − {best}: {_difference_text(d)}" for d in finals)))
  crossings = {name: crossing_step(curves, name, best) for name in thompson_lines}
  near = [step is not None and step > 1 and abs(step - PAPER_CROSSING) <= CROSSING_TOLERANCE
          for step in crossings.values()]
  described = "; ".join(
      f"{name}: " + ("never below at the end" if step is None else
                     "below throughout (no crossing)" if step == 1 else f"from step {step:,}")
      for name, step in crossings.items())
  results.append(Claim(f"Thompson sampling overtakes {best} near step 3,000 (within 1,000)",
                       all(near), described))
  return results


def main(argv):
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  from bandits.figure import records_in  # pylint: disable=import-outside-toplevel
  from runner.cli import UsageError  # pylint: disable=import-outside-toplevel
  run_dirs = flags.FLAGS.run_dirs
  missing = [run_dir for run_dir in run_dirs if not os.path.isdir(run_dir)]
  if missing:
    raise UsageError(f"--run_dirs: {missing[0]} is not a directory; allowed: output_dirs of "
                     "bandits.main")
  try:
    records = records_in(run_dirs)
  except ValueError as error:
    raise UsageError(str(error)) from error
  if not records:
    raise UsageError(f"no regret_<agent>.npz in --run_dirs={','.join(run_dirs)}")
  print(claims_table(claims(records)), end="")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from runner import cli
  absl_flags.DEFINE_list("run_dirs", None, "Bandit run directories (output_dir of bandits.main) "
                         "whose regret records are checked together.", required=True)
  cli.run(main)
