"""A paper's claims held to our runs: each claim, whether the runs bear it out, and the evidence,
with differences paired over seeds (seed s gives two methods the same data order and
initialisation streams, so a per-seed difference removes the spread between seeds).

Shared by Figure 5's claims (`report.bandit_claims`) and Table 3's (`report.resnet_claims`).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Claim:
  """One of the paper's claims: its statement, whether the runs bear it out, and the evidence."""

  statement: str
  holds: Optional[bool]   # None: the runs cannot tell (a line or the steps it needs are missing)
  evidence: str


@dataclasses.dataclass(frozen=True)
class SeedDifference:
  """`first` − `second` of one quantity over the seeds both have."""

  seeds: tuple[int, ...]
  mean: float
  standard_error: float   # NaN for one seed
  first_higher: int       # seeds where `first` is the higher


def seed_difference(first: Mapping[int, float], second: Mapping[int, float]) -> SeedDifference:
  """`first[s] − second[s]` over the seeds both map; ValueError if they share none."""
  seeds = tuple(sorted(set(first) & set(second)))
  if not seeds:
    raise ValueError(f"no seed in common (seeds {sorted(first)} and {sorted(second)}); allowed: "
                     "runs on the same seeds")
  differences = np.array([first[seed] - second[seed] for seed in seeds], dtype=float)
  error = (float(differences.std(ddof=1) / np.sqrt(len(seeds))) if len(seeds) > 1
           else float("nan"))
  return SeedDifference(seeds, float(differences.mean()), error, int(np.sum(differences > 0)))


def signed(value: float, form: str) -> str:
  """`value` with its sign and a true minus sign: +1,234 / −0.012."""
  return format(value, "+" + form).replace("-", "−")


def difference_text(difference: SeedDifference, form: str = ",.0f") -> str:
  """"−0.012 ± 0.004" (no ± for one seed)."""
  error = ("" if np.isnan(difference.standard_error)
           else f" ± {format(difference.standard_error, form)}")
  return signed(difference.mean, form) + error


def claims_table(results: Sequence[Claim]) -> str:
  """Markdown: one row per claim, whether it holds and the evidence."""
  verdicts = {True: "holds", False: "does not hold", None: "cannot tell yet"}
  rows = ["| the paper's claim | here | paired over seeds: mean ± standard error |",
          "|---|---|---|"]
  rows += [f"| {claim.statement} | {verdicts[claim.holds]} | {claim.evidence} |"
           for claim in results]
  return "\n".join(rows) + "\n"
