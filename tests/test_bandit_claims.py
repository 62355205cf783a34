"""report.bandit_claims: Figure 5's claims paired over seeds, on records with known answers."""
import numpy as np
import pytest

from bandits.interaction import RegretRecord
from report import bandit_claims


def _record(line_names, seeds, per_step):
  """A record whose per-step expected regret is `per_step[seed][line]` (a [steps] array)."""
  expected = np.array([[per_step[seed][name] for name in line_names] for seed in seeds],
                      dtype=float)
  zeros = np.zeros_like(expected)
  return RegretRecord(list(line_names), list(seeds), zeros.astype(np.int8), zeros, expected,
                      expected, 0.0)


HORIZON = 5000


def _constant(rate):
  return np.full(HORIZON, float(rate))


def test_refined_below_vi_is_paired_by_seed_not_by_row():
  """Catches pairing the lines' rows instead of their seeds: refined_ts's record lists seeds in
  another order than vi_ts's, and seed 1's streams are much harder for both; paired by row the
  difference would be +0.5 per step on one seed and -1.5 on the other, by seed -0.5 on both."""
  refined = _record(["refined_ts"], [1, 0], {1: {"refined_ts": _constant(2.0)},
                                             0: {"refined_ts": _constant(0.5)}})
  vi = _record(["vi_ts"], [0, 1], {0: {"vi_ts": _constant(1.0)}, 1: {"vi_ts": _constant(2.5)}})
  curves = bandit_claims.curves_by_line([refined, vi])
  difference = bandit_claims.paired_difference(curves, "refined_ts", "vi_ts", 1000)
  assert difference.seeds == (0, 1) and difference.first_won == 2
  assert difference.mean == pytest.approx(-500.0) and difference.standard_error == pytest.approx(0)
  first = bandit_claims.claims([refined, vi])[0]
  assert first.holds is True and "at 5 of 5" in first.evidence


def test_the_crossing_and_the_best_eps_greedy_line():
  """ε-greedy 0.01 at 1 per step; Thompson sampling at 0.5 per step for 100 steps (below it),
  2 per step to step 2,000 (cumulative 3,850, above), then 0: below again from step 3,851 to the
  end, the crossing, 851 steps from the paper's 3,000 (near). The worse ε line (3 per step) is not
  the one compared. Catches the crossing taken as the first step below (step 1: "below
  throughout") and the best ε line chosen other than by final regret."""
  thompson = np.concatenate([np.full(100, 0.5), np.full(1900, 2.0), np.zeros(HORIZON - 2000)])
  per_step = {seed: {"refined_ts": thompson, "vi_ts": thompson,
                     "eps_greedy_0.01": _constant(1.0), "eps_greedy_0.1": _constant(3.0)}
              for seed in (0, 1, 2)}
  record = _record(["refined_ts", "vi_ts", "eps_greedy_0.01", "eps_greedy_0.1"], [0, 1, 2],
                   per_step)
  curves = bandit_claims.curves_by_line([record])
  assert bandit_claims.crossing_step(curves, "refined_ts", "eps_greedy_0.01") == 3851
  first, final, crossing = bandit_claims.claims([record])
  assert first.holds is False   # equal lines: not below
  assert final.holds is True and "eps_greedy_0.01" in final.statement
  assert crossing.holds is True and "from step 3,851" in crossing.evidence


def test_a_thompson_sampler_ahead_throughout_is_no_crossing():
  per_step = {0: {"vi_ts": _constant(0.5), "eps_greedy_0.05": _constant(1.0)}}
  curves = bandit_claims.curves_by_line([_record(["vi_ts", "eps_greedy_0.05"], [0], per_step)])
  assert bandit_claims.crossing_step(curves, "vi_ts", "eps_greedy_0.05") == 1
  claims = bandit_claims.claims([_record(["vi_ts", "eps_greedy_0.05"], [0], per_step)])
  assert claims[0].holds is None and claims[2].holds is False
  assert "below throughout" in claims[2].evidence
