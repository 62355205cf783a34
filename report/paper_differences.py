"""The report's "Where we differ and why", computed from a table's runs.

Per table: whether ELBO_aux ≥ ELBO held in every refined VI run, on how many rows refined VI's
mean beat VI's, the cells beyond BEYOND_SIGMA paper σ, and a link to the benchmark README's
results, which says why.
"""
from __future__ import annotations

import os
import re
from types import ModuleType
from typing import Sequence

import pandas as pd

from report import results_loader, table_checks, tables
from report.table_text import BEYOND_SIGMA, sigma_text

# What "Where we differ and why" says of a table of smoke runs, instead of their distances from the
# paper (`./run_all.sh --scale=smoke`: tiny settings, which check that the code runs).
SMOKE_DIFFERENCES = "  - Not set against the paper: these are smoke runs at tiny settings."
REPOSITORY = results_loader.REPOSITORY


def readme_link(readme: str, output_dir: str) -> str:
  """A Markdown link to the README's first "## Results" section (GitHub's heading anchor)."""
  path = os.path.join(REPOSITORY, readme)
  anchor = ""
  if os.path.exists(path):
    with open(path) as stream:
      heading = next((line for line in stream if line.startswith("## Results")), None)
    if heading:
      slug = re.sub(r"[^\w\- ]", "", heading[3:].strip().lower()).replace(" ", "-")
      anchor = f"#{slug}"
  return f"[{readme}, Results]({os.path.relpath(path, output_dir)}{anchor})"


def _metric_name(method: str, metric: str) -> str:
  return f"{tables.METHOD_TITLES[method]} {tables.METRIC_TITLES[metric]}"


def differences(module: ModuleType, runs: pd.DataFrame, table: pd.DataFrame, output_dir: str,
                datasets: list[str], smoke: bool = False) -> list[str]:
  """The table's Markdown bullets for "Where we differ and why", computed from the runs.

  Cells beyond BEYOND_SIGMA are listed per dataset in `datasets` order, in the table's column
  order (none for `smoke` runs).
  """
  spec = module.PAPER_TABLE
  lines = [f"- **Table {spec.number}** ({spec.title}):"]
  lines += refined_checks(runs, table, module.HIGHER_IS_BETTER)
  if smoke:
    return lines + [SMOKE_DIFFERENCES]
  return lines + paper_differences(module, table, output_dir, datasets)


def refined_checks(runs: pd.DataFrame, table: pd.DataFrame, higher_is_better: Sequence[str],
                   indent: str = "  ", rows: str = "datasets") -> list[str]:
  """Bullets: ELBO_aux ≥ ELBO per refined run; refined VI's mean ≥ VI's, per metric and row."""
  lines = []
  refined = table_checks.elbo_aux_holds(runs)
  if len(refined):
    failed = ", ".join(f"{r['dataset']} seed {r['seed']}" for _, r in refined[~refined["holds"]]
                       .iterrows())
    lines.append(f"{indent}- ELBO_aux ≥ ELBO in {int(refined['holds'].sum())} of {len(refined)} "
                 "refined VI runs" + (f" (not: {failed})." if failed else "."))
  for metric in higher_is_better:
    better, compared = table_checks.refined_vs_vi(table, metric)
    if not compared:
      continue
    worse = sorted(set(compared) - set(better))
    name = tables.METRIC_TITLES[metric]
    lines.append(f"{indent}- Refined VI's mean {name} ≥ VI's on {len(better)} of {len(compared)} "
                 f"{rows}" + (f" (not: {', '.join(worse)})." if worse else "."))
  return lines


def paper_differences(module: ModuleType, table: pd.DataFrame, output_dir: str,
                      datasets: list[str]) -> list[str]:
  """Bullets: the cells beyond BEYOND_SIGMA paper σ per dataset, then the README on why."""
  lines = []
  deviations = table_checks.paper_deviations(table, module.COMPARISONS)
  known = deviations.dropna(subset=["sigma"])
  column_order = {(method, metric): i for i, (method, metric, _) in enumerate(module.COLUMNS)}
  if not len(known):
    lines.append("  - No cell has a paper value with a std to measure it against.")
  else:
    beyond = known[[table_checks.is_beyond(s, BEYOND_SIGMA) for s in known["sigma"]]].assign(
        dataset_rank=lambda f: f["dataset"].map(datasets.index),
        column_rank=lambda f: [column_order.get(key, len(column_order))
                               for key in zip(f["method"], f["metric"])])
    beyond = beyond.sort_values(["dataset_rank", "column_rank"])
    lines.append(f"  - Beyond {BEYOND_SIGMA:g} paper σ: {len(beyond)} of {len(known)} cells"
                 + (":" if len(beyond) else "."))
    for dataset, part in beyond.groupby("dataset", sort=False):
      cells = ", ".join(f"{_metric_name(r['method'], r['metric'])} {sigma_text(r['sigma'])}"
                        for _, r in part.iterrows())
      lines.append(f"    - {dataset}: {cells}")
  if len(deviations) > len(known):
    lines.append(f"  - {len(deviations) - len(known)} cells have a paper std of 0 and no σ.")
  lines.append(f"  - Why: {readme_link(module.PAPER_TABLE.readme, output_dir)}.")
  return lines
