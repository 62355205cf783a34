"""A bandit run's regret record (`RegretRecord`, the regret_<agent>.npz files) and the steps its
tables report: what the figure and the reports read, without TensorFlow (so that they start at
once; `bandits.interaction`, which writes the records, loads it)."""
from __future__ import annotations

import dataclasses
import os
import zipfile
import zlib
from typing import Mapping, Optional, Sequence

import numpy as np

from bandits import mushroom


def reported_steps(horizon: int, report_interval: int) -> list[int]:
  """Every `report_interval`-th step, and the horizon."""
  steps = list(range(report_interval, horizon + 1, report_interval))
  return steps if steps and steps[-1] == horizon else steps + [horizon]


@dataclasses.dataclass
class RegretRecord:
  """What happened, [seeds, lines, steps]: actions, realised rewards, per-step regrets against
  the omniscient agent (expected: the luck of poisonous mushrooms averaged out), and the
  predicted reward of eating minus passing each action was chosen from (None in records made
  before it was kept)."""
  line_names: list[str]
  seeds: list[int]
  actions: np.ndarray
  rewards: np.ndarray
  expected_regret: np.ndarray
  realised_regret: np.ndarray
  seconds: float
  predicted_gap: Optional[np.ndarray] = None

  def cumulative(self, realised: bool = False) -> np.ndarray:
    return np.cumsum(self.realised_regret if realised else self.expected_regret, axis=-1)

  def metrics(self, report_interval: int) -> Mapping[str, dict]:
    """Per line: final cumulative regret (mean and std over seeds, and per seed), realised regret,
    the regret every `report_interval` steps, and the fraction of mushrooms eaten."""
    expected, realised = self.cumulative(), self.cumulative(realised=True)
    horizon = expected.shape[-1]
    report_steps = reported_steps(horizon, report_interval)
    lines = {}
    for index, name in enumerate(self.line_names):
      lines[name] = {
          "cumulative_regret": float(np.mean(expected[:, index, -1])),
          "cumulative_regret_std": float(np.std(expected[:, index, -1])),
          "cumulative_regret_per_seed": [float(v) for v in expected[:, index, -1]],
          "cumulative_realised_regret": float(np.mean(realised[:, index, -1])),
          "regret_at_steps": {str(step): float(np.mean(expected[:, index, step - 1]))
                              for step in report_steps},
          "eat_fraction": float(np.mean(self.actions[:, index] == mushroom.EAT)),
      }
    return lines

  def save(self, path: str) -> None:
    """Writes the record as a compressed .npz, atomically."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as handle:
      np.savez_compressed(handle, line_names=np.array(self.line_names), seeds=np.array(self.seeds),
                          actions=self.actions.astype(np.int8), rewards=self.rewards,
                          expected_regret=self.expected_regret.astype(np.float32),
                          realised_regret=self.realised_regret.astype(np.float32),
                          seconds=np.float64(self.seconds),
                          **({} if self.predicted_gap is None
                             else {"predicted_gap": self.predicted_gap.astype(np.float32)}))
    os.replace(temporary, path)

  @classmethod
  def over_seeds(cls, records: Sequence["RegretRecord"]) -> "RegretRecord":
    """One record of the union of the seeds of `records` (one agent's runs over disjoint seeds:
    a seed's environment stream does not depend on the others), ordered by seed; ValueError if
    a seed repeats or the lines or horizons differ. `seconds` is the runs' sum."""
    seeds = [seed for record in records for seed in record.seeds]
    if len(set(seeds)) != len(seeds):
      raise ValueError(f"seeds {seeds} repeat; allowed: runs over disjoint seeds")
    for record in records[1:]:
      if (record.line_names != records[0].line_names
          or record.expected_regret.shape[1:] != records[0].expected_regret.shape[1:]):
        raise ValueError(f"lines {record.line_names} over {record.expected_regret.shape[-1]} "
                         f"steps differ from {records[0].line_names} over "
                         f"{records[0].expected_regret.shape[-1]}; allowed: the same agent "
                         "and horizon")
    order = np.argsort(seeds)

    def joined(name: str) -> np.ndarray:
      return np.concatenate([getattr(record, name) for record in records])[order]
    has_gaps = all(record.predicted_gap is not None for record in records)
    return cls(line_names=list(records[0].line_names), seeds=[seeds[i] for i in order],
               actions=joined("actions"), rewards=joined("rewards"),
               expected_regret=joined("expected_regret"),
               realised_regret=joined("realised_regret"),
               seconds=float(sum(record.seconds for record in records)),
               predicted_gap=joined("predicted_gap") if has_gaps else None)

  @classmethod
  def load(cls, path: str) -> "RegretRecord":
    """The record `save` wrote at `path`; RuntimeError in one line if the file is not one (cut
    short, overwritten, its arrays missing or of disagreeing shapes)."""
    try:
      with np.load(path) as saved:
        record = cls(line_names=[str(n) for n in saved["line_names"]],
                     seeds=[int(s) for s in saved["seeds"]], actions=saved["actions"],
                     rewards=saved["rewards"], expected_regret=saved["expected_regret"],
                     realised_regret=saved["realised_regret"], seconds=float(saved["seconds"]),
                     predicted_gap=(saved["predicted_gap"] if "predicted_gap" in saved.files
                                    else None))
    except (OSError, EOFError, KeyError, ValueError, TypeError, OverflowError, zipfile.BadZipFile,
            zlib.error) as error:
      raise RuntimeError(f"{path} is not a regret record ({type(error).__name__}: {error}); "
                         "allowed: regret_<agent>.npz as bandits.main writes it") from None
    shape = (len(record.seeds), len(record.line_names))
    arrays = ("actions", "rewards", "expected_regret", "realised_regret") + (
        () if record.predicted_gap is None else ("predicted_gap",))
    shapes = {name: getattr(record, name).shape for name in arrays}
    if any(len(found) != 3 or found[:2] != shape or found != shapes["actions"]
           for found in shapes.values()):
      raise RuntimeError(f"{path} is not a regret record: arrays of shapes {shapes} for "
                         f"{shape[0]} seed(s) and {shape[1]} line(s); allowed: all "
                         "[seeds, lines, steps], as bandits.main writes them")
    return record
