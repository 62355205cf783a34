"""Table 3's claims held to one row group's runs, paired over seeds (`report.claims`).

The paper (Section 4.2, Table 3) claims, for ResNet-20:

1. refined VI predicts better than VI (test MLL) on every variant;
2. (our control, not the paper's: its tables have no such column) and better than VI trained on
   for refinement's cost (`vi_equal_compute`);
3. ELBO_aux is above the VI ELBO on every refined run (Eq. 13 with the refined samples), and
4. rises with every auxiliary variable (the whole-training-set ELBO_aux after each stage, where
   the run recorded it with --stage_elbo_aux: its stage_elbo_aux.csv);
5. hybrid models predict better than full ones (VI and refined VI);
6. refined VI stands against the deep ensemble as in the paper's table: above it on the hybrid
   variants, below it on full_bn, level (within 0.01) on full.

Differences are in test MLL, the run minus the other, with standard errors over seeds.
"""
from __future__ import annotations

import csv
import os
from typing import Optional

import numpy as np
import pandas as pd

from common.results import TEST_LOG_PREDICTIVE_FILENAME
from report.claims import Claim, SeedDifference, difference_text, seed_difference, signed

STAGES_FILENAME = "stage_elbo_aux.csv"   # common.refinement_figures.TRACE_STAGES_FILENAME
VARIANT_PAIRS = (("hybrid_bn", "full_bn"), ("hybrid", "full"))
# Below this MLL difference the paper's table has refined VI and the ensemble level.
PAPER_LEVEL = 0.01


def _by_seed(runs: pd.DataFrame, variant: str, method: str, metric: str = "test_mll"
             ) -> dict[int, float]:
  """{seed: metric} of `method` on `variant`; ValueError if a seed has two runs."""
  cells = runs[(runs["variant"] == variant) & (runs["method"] == method)]
  if cells["seed"].duplicated().any():
    raise ValueError(f"{method} on {variant} has several runs of one seed (their settings "
                     "differ): not paired")
  return {int(seed): float(value) for seed, value in zip(cells["seed"], cells[metric])}


def _run_path(runs: pd.DataFrame, variant: str, method: str, seed: int) -> str:
  cells = runs[(runs["variant"] == variant) & (runs["method"] == method) & (runs["seed"] == seed)]
  return str(cells["path"].iloc[0])


def per_image_difference(first_results: str, second_results: str) -> Optional[tuple[float, float,
                                                                                    int]]:
  """(mean, standard error, images) of log p_first(y_n | x_n) − log p_second(y_n | x_n) over the
  test images, paired image by image, from the test_log_predictive.npy beside each results.json;
  None unless both runs kept it for the same number of images. On one seed it says whether an
  MLL difference stands out of the test set's sampling noise (not of training's seed noise)."""
  paths = [os.path.join(os.path.dirname(results), TEST_LOG_PREDICTIVE_FILENAME)
           for results in (first_results, second_results)]
  if not all(os.path.exists(path) for path in paths):
    return None
  first, second = (np.load(path).astype(np.float64) for path in paths)
  if first.shape != second.shape or len(first) < 2:
    return None
  differences = first - second
  return (float(differences.mean()), float(differences.std(ddof=1) / np.sqrt(len(differences))),
          len(differences))


def _comparison(difference: SeedDifference, first: str) -> str:
  clear = (" (beyond 2 standard errors)" if difference.standard_error == difference.standard_error
           and abs(difference.mean) > 2 * difference.standard_error else "")
  return (f"{difference_text(difference, '.3f')}{clear}, {first} higher on "
          f"{difference.first_higher} of {len(difference.seeds)} seeds")


def _above(runs: pd.DataFrame, first: str, second: str, statement: str) -> Claim:
  """`first` above `second` in mean test MLL over their common seeds on every variant."""
  parts, verdicts = [], []
  for variant in _variants(runs):
    ours, theirs = _by_seed(runs, variant, first), _by_seed(runs, variant, second)
    if not set(ours) & set(theirs):
      continue
    difference = seed_difference(ours, theirs)
    verdicts.append(difference.mean > 0)
    text = f"{variant}: {_comparison(difference, first)}"
    if len(difference.seeds) == 1:
      seed = difference.seeds[0]
      images = per_image_difference(_run_path(runs, variant, first, seed),
                                    _run_path(runs, variant, second, seed))
      if images is not None:
        mean, error, count = images
        text += (f" (paired over its {count:,} test images: {signed(mean, '.4f')} ± "
                 f"{error:.4f})")
    parts.append(text)
  if not parts:
    return Claim(statement, None, f"needs {first} and {second} runs of one seed")
  return Claim(statement, all(verdicts), "; ".join(parts))


def _variants(runs: pd.DataFrame) -> list[str]:
  order = [variant for pair in VARIANT_PAIRS for variant in pair]
  present = set(runs["variant"])
  return [v for v in order if v in present] + sorted(present - set(order))


def stage_values(results_path: str) -> Optional[list[float]]:
  """The whole-training-set ELBO_aux the run recorded: the VI draws', then after each stage
  (its stage_elbo_aux.csv beside results.json); None if it recorded none."""
  path = os.path.join(os.path.dirname(results_path), STAGES_FILENAME)
  if not os.path.exists(path):
    return None
  with open(path) as stream:
    return [float(row["elbo_aux_mean"]) for row in csv.DictReader(stream)]


def _elbo_claims(runs: pd.DataFrame) -> list[Claim]:
  refined = runs[runs["method"] == "refined_vi"].drop_duplicates(subset="path")
  statement = "ELBO_aux above the VI ELBO on every refined run"
  if not len(refined):
    return [Claim(statement, None, "needs a refined_vi run"),
            Claim("ELBO_aux rises with every auxiliary variable", None, "needs a refined_vi run")]
  gains = refined["elbo_aux"] - refined["elbo"]
  above = Claim(statement, bool((gains > 0).all()),
                f"above on {int((gains > 0).sum())} of {len(gains)} runs; ELBO_aux − ELBO "
                + (f"{signed(gains.min(), ',.0f')} to " if len(gains) > 1 else "")
                + f"{signed(gains.max(), ',.0f')} nats")
  steps = []   # per run that recorded its stages: each stage's rise
  for path in refined["path"]:
    values = stage_values(path)
    if values is not None and len(values) > 1:
      steps.append([after - before for before, after in zip(values, values[1:])])
  statement = "ELBO_aux rises with every auxiliary variable"
  if not steps:
    return [above, Claim(statement, None, "no refined run recorded its stages "
                                          "(--stage_elbo_aux)")]
  rising = sum(all(step > 0 for step in run) for run in steps)
  smallest = min(min(run) for run in steps)
  return [above, Claim(statement, rising == len(steps),
                       f"every stage rises on {rising} of {len(steps)} runs that recorded them "
                       f"(K = {'/'.join(sorted({str(len(run)) for run in steps}))}); smallest "
                       f"rise {signed(smallest, ',.0f')} nats")]


def _hybrid_above_full(runs: pd.DataFrame, statement: str) -> Claim:
  parts, verdicts = [], []
  for hybrid, full in VARIANT_PAIRS:
    for method in ("vi", "refined_vi"):
      ours, theirs = _by_seed(runs, hybrid, method), _by_seed(runs, full, method)
      if set(ours) & set(theirs):
        difference = seed_difference(ours, theirs)
        verdicts.append(difference.mean > 0)
        parts.append(f"{method} {hybrid} − {full}: {_comparison(difference, hybrid)}")
  if not parts:
    return Claim(statement, None, "needs a hybrid and a full run of one method and seed")
  return Claim(statement, all(verdicts), "; ".join(parts))


def _paper_ordering(paper: pd.DataFrame, variant: str) -> Optional[float]:
  """The paper's refined VI − deep ensemble MLL on `variant` (None if it has no such row)."""
  rows = paper[paper["variant"] == variant].set_index("method")["mll"]
  if not {"refined_vi", "deep_ensemble"} <= set(rows.index):
    return None
  return float(rows["refined_vi"] - rows["deep_ensemble"])


def _against_ensemble(runs: pd.DataFrame, paper: pd.DataFrame, statement: str) -> Claim:
  parts, verdicts = [], []
  for variant in _variants(runs):
    ours = _by_seed(runs, variant, "refined_vi")
    ensemble = _by_seed(runs, variant, "deep_ensemble")
    paper_difference = _paper_ordering(paper, variant)
    if not set(ours) & set(ensemble) or paper_difference is None:
      continue
    difference = seed_difference(ours, ensemble)
    if abs(paper_difference) < PAPER_LEVEL:
      verdicts.append(abs(difference.mean) < PAPER_LEVEL)
    else:
      verdicts.append((difference.mean > 0) == (paper_difference > 0))
    seeds = ", ".join(map(str, difference.seeds))
    parts.append(f"{variant}: {difference_text(difference, '.3f')} on seed"
                 f"{'s' if len(difference.seeds) > 1 else ''} {seeds} "
                 f"(paper {signed(paper_difference, '.3f')})")
  if not parts:
    return Claim(statement, None, "needs refined_vi and deep_ensemble runs of one seed")
  return Claim(statement, all(verdicts), "; ".join(parts))


def claims(runs: pd.DataFrame, paper: pd.DataFrame, paper_variants: dict[str, str]
           ) -> list[Claim]:
  """The paper's Table 3 claims against one row group's runs (`resnet_table.runs_frame`).

  `paper`: the paper's Table 3 (variant, method, mll), its variants named as `paper_variants`
  maps ours."""
  paper = paper.assign(variant=paper["variant"].map({v: k for k, v in paper_variants.items()}))
  def paired(statement: str, build) -> Claim:
    try:
      return build(statement)
    except ValueError as error:   # e.g. two runs of one seed in a cell: nothing to pair
      return Claim(statement, None, str(error))
  return [
      paired("refined VI above VI in test MLL on every variant",
             lambda statement: _above(runs, "refined_vi", "vi", statement)),
      paired("refined VI above VI with equal compute in test MLL on every variant (our control "
             "for refinement's extra steps: the paper has no such column)",
             lambda statement: _above(runs, "refined_vi", "vi_equal_compute", statement)),
      *_elbo_claims(runs),
      paired("hybrid above full (VI and refined VI)",
             lambda statement: _hybrid_above_full(runs, statement)),
      paired("refined VI against the deep ensemble as in the paper (above it on hybrid, below "
             f"on full_bn, level within {PAPER_LEVEL} on full)",
             lambda statement: _against_ensemble(runs, paper, statement)),
  ]
