"""The report's Tables 1-3: ours beside the paper's, with our distance from it in paper σ.

Each cell reads "ours ± std over seeds" above "(paper mean ± std, ours − paper in the paper's
std)". The numbers come from the benchmark's own table module (`report.uci_table`,
`report.image_table`, `report.resnet_table`): its `PAPER_TABLE` (which paper table, the folder of
runs it reports), its loader, its summary beside the paper's CSV, its columns and comparisons; the
layout, the σ deviations and the checks from `report.tables` and `report.table_checks`. This
module lays them out, for Markdown (REPORT.md) and LaTeX (table1_uci.tex, table2_lenet5.tex): each
cell's text from `report.table_text`, the "Where we differ and why" bullets from
`report.paper_differences`.

A table whose spec names evidence folders (`PaperTable.evidence`, Table 3) is laid out as a row
group per folder, in the order named, each headed by its configuration and followed by what it
shows; its checks are made per group. The others read every counted run of their benchmark.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from types import ModuleType
from typing import Optional

import pandas as pd

from report import results_loader, table_checks, tables
from report.claims import claims_table
from report.paper_differences import (SMOKE_DIFFERENCES, differences, paper_differences,
                                      refined_checks)
from report.table_text import sigma_cell, to_latex


@dataclasses.dataclass(frozen=True)
class EvidenceGroup:
  """A folder of runs a table reports as its own row group, and what the group shows."""
  folder: str   # relative to the results directory; read even below `ablations/`
  label: str   # what the group is, in a few words (its configuration is read from its runs)
  finding: Optional[str] = None   # one line on what it shows: our reading, so written, not computed
  rows_by_folder: bool = False   # a row per run folder (variants of one setting), not per dataset


@dataclasses.dataclass(frozen=True)
class PaperTable:
  """A paper table we reproduce, as the benchmark's table module declares it (`PAPER_TABLE`).

  `benchmark` names the folder of its runs below the results directory (and their results.json
  "benchmark"). With `evidence`, the table shows those folders' runs only, a row group each, in
  that order; its module then also gives `runs_frame(loaded runs)` and
  `configuration(runs) -> list of words`, and may give `claims(runs, paper_dir) -> list of
  report.claims.Claim`, shown under each group.
  """
  number: int
  title: str
  benchmark: str
  latex_name: str
  readme: str   # the benchmark's README, relative to the repository: the "why" of differences
  description: str   # what the columns measure, in which units
  evidence: tuple[EvidenceGroup, ...] = ()


@dataclasses.dataclass
class TableReport:
  """One table's parts of the report: Markdown section, LaTeX, differences, machine time."""
  spec: PaperTable
  markdown: str
  latex: str
  differences: list[str]
  hours: float
  num_runs: int


def machine_time_text(seconds: float, num_runs: int) -> str:
  """"4.4 h over 225 runs" (minutes below an hour)."""
  amount = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
  return f"{amount} over {num_runs} run{'s' if num_runs != 1 else ''}"


def seeds_text(rows: list[list[str]]) -> str:
  """How many seeds each cell averages, from the layout's seeds column."""
  counts = {cells[-1] for cells in rows}
  if counts == {"1"}:
    return "Every cell is one seed (no ± std)."
  if len(counts) == 1:
    return f"Every cell is the mean ± std over {counts.pop()} seeds."
  return "Cells average the seeds in the last column (a/b: the row's methods differ)."


def paper_rows(module: ModuleType, paper_dir: Optional[str] = None) -> list[str]:
  """The paper's rows in its order (Table 3's are its variants: the module renames them)."""
  paper = results_loader.load_paper_table(module.PAPER_CSV, paper_dir)
  paper = paper.rename(columns={old: new for old, new in getattr(module, "PAPER_RENAMES", {})
                                .items() if new == "dataset"})
  return list(dict.fromkeys(paper["dataset"]))


def _caption(spec: PaperTable, smoke: bool, groups: str = "") -> str:
  """The LaTeX table's caption: what its cells hold."""
  return (f"Table {spec.number}: {spec.title}{groups}. Ours (mean ± std over seeds), below it the "
          "paper's mean ± std" + (" (smoke runs at tiny settings: not comparable)." if smoke else
                                  " and our distance from it in the paper's std."))


def table_report(module: ModuleType, results_dir: str, output_dir: str,
                 paper_dir: Optional[str] = None, smoke: bool = False) -> Optional[TableReport]:
  """The report parts of the table a benchmark's table module declares (`module.PAPER_TABLE`), or
  None when `results_dir` has no run of its benchmark (of its evidence folders, if it names
  them). `smoke` runs get no distances from the paper."""
  spec = module.PAPER_TABLE
  if spec.evidence:
    return grouped_table_report(module, results_dir, output_dir, paper_dir, smoke)
  if not results_loader.load_runs(results_dir, spec.benchmark):
    return None
  runs = module.load_runs(results_dir)
  table = module.summary(runs, paper_dir)
  order = paper_rows(module, paper_dir)
  datasets = order + sorted(set(table["dataset"]) - set(order))
  header, rows = tables.layout_rows(table, module.COLUMNS, datasets,
                                    functools.partial(sigma_cell, with_sigma=not smoke))
  seconds, num_runs = table_checks.machine_time(runs)
  missing = [d for d in order if d not in set(table["dataset"])]
  markdown = [
      f"## Table {spec.number}: {spec.title}", "", spec.description, "",
      "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
      *["| " + " | ".join(cells) + " |" for cells in rows], "",
      f"{seeds_text(rows)} Machine time: {machine_time_text(seconds, num_runs)} (the sum of each "
      "run's wall time, over all its processes where it resumed; VI training shared by vi, "
      "refined_vi and vi_equal_compute counts once)."
  ]
  if missing:
    markdown += ["", f"Not run yet: {', '.join(missing)}."]
  return TableReport(spec, "\n".join(markdown) + "\n",
                     to_latex(header, rows, _caption(spec, smoke)),
                     differences(module, runs, table, output_dir, datasets, smoke),
                     seconds / 3600, num_runs)


def rows_named_by_folder(runs: pd.DataFrame, folder: str) -> pd.DataFrame:
  """The runs with each row named by its run's folder below `folder`, without the seed folder
  ("hybrid_bn/refined_vi_refit"); a run that filled several rows (a shared ensemble) fills one."""
  def name(path: str) -> str:
    parts = os.path.relpath(os.path.dirname(path), folder).split(os.sep)
    if len(parts) > 1 and re.fullmatch(r"seed_\d+", parts[-1]):
      parts = parts[:-1]
    return "/".join(parts)
  named = runs.assign(dataset=[name(path) for path in runs["path"]])
  return named.drop_duplicates(subset=["path", "dataset", "method"], ignore_index=True)


@dataclasses.dataclass
class _Group:
  """One evidence group's runs, summary and layout (or no runs)."""
  number: int
  spec: EvidenceGroup
  folder: str   # as the report names it: under results_dir
  runs: Optional[pd.DataFrame] = None
  table: Optional[pd.DataFrame] = None
  rows: Optional[list[list[str]]] = None
  configuration: Optional[list[str]] = None


def grouped_table_report(module: ModuleType, results_dir: str, output_dir: str,
                         paper_dir: Optional[str] = None,
                         smoke: bool = False) -> Optional[TableReport]:
  """A table of row groups, one per evidence folder the spec names, in its order; None when no
  folder has a run.

  Each group: a heading line (number, label, configuration from its runs, folder), its rows,
  its seeds and machine time, then what it shows. A folder without runs is listed as not run yet.
  The checks under "Where we differ and why" are made per group and say which.
  """
  spec = module.PAPER_TABLE
  evidence = results_loader.load_evidence(results_dir, [g.folder for g in spec.evidence],
                                          spec.benchmark)
  if not any(evidence.values()):
    return None
  order = paper_rows(module, paper_dir)
  header: list[str] = []
  groups = []
  for number, group in enumerate(spec.evidence, 1):
    part = _Group(number, group, os.path.join(results_dir, group.folder))
    groups.append(part)
    if not evidence[group.folder]:
      continue
    runs = module.runs_frame(evidence[group.folder])
    if group.rows_by_folder:
      runs = rows_named_by_folder(runs, part.folder)
    part.runs, part.table = runs, module.summary(runs, paper_dir)
    datasets = order + sorted(set(part.table["dataset"]) - set(order))
    header, part.rows = tables.layout_rows(part.table, module.COLUMNS, datasets,
                                           functools.partial(sigma_cell, with_sigma=not smoke))
    part.configuration = module.configuration(runs)

  markdown = [f"## Table {spec.number}: {spec.title}", "", spec.description, ""]
  latex_rows = []
  total_seconds, total_runs = 0.0, 0
  for part in groups:
    heading = f"**{part.number}. {part.spec.label}**"
    if part.runs is None:
      markdown += [f"{heading} (`{part.folder}`): not run yet.", ""]
      continue
    # A run that fills two rows (the shared ensemble) is one run and its time counts once.
    seconds, num_runs = table_checks.machine_time(part.runs.drop_duplicates(subset="path"))
    total_seconds, total_runs = total_seconds + seconds, total_runs + num_runs
    markdown += [
        f"{heading}: {', '.join(part.configuration)} (`{part.folder}`).", "",
        "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
        *["| " + " | ".join(cells) + " |" for cells in part.rows], "",
        f"{seeds_text(part.rows)} Machine time: {machine_time_text(seconds, num_runs)}.", ""]
    if hasattr(module, "claims") and not part.spec.rows_by_folder:
      markdown += ["The paper's claims on this group, paired over seeds (MLL differences):", "",
                   claims_table(module.claims(part.runs, paper_dir)).rstrip(), ""]
    if not smoke:   # the finding was written about the committed runs, not smoke runs
      markdown += ["What it shows: " + (part.spec.finding or "not written up yet; its checks are "
                                        "under \"Where we differ and why\"."), ""]
    latex_rows.append([f"{part.number}. {part.spec.label}"] + [""] * (len(header) - 1))
    latex_rows += part.rows
  shown = set().union(*(set(part.table["dataset"]) for part in groups if part.table is not None))
  missing = [row for row in order if row not in shown]
  markdown.append(
      f"Machine time in all: {machine_time_text(total_seconds, total_runs)} (the sum of each "
      "run's wall time, over all its processes where it resumed; VI training shared by vi, "
      "refined_vi and vi_equal_compute counts once).")
  if missing:
    markdown += ["", f"Not run yet: {', '.join(missing)}."]
  caption = _caption(spec, smoke, ", a row group per configuration")
  return TableReport(spec, "\n".join(markdown) + "\n", to_latex(header, latex_rows, caption),
                     grouped_differences(module, groups, output_dir, order, smoke),
                     total_seconds / 3600, total_runs)


def grouped_differences(module: ModuleType, groups: list[_Group], output_dir: str,
                        order: list[str], smoke: bool = False) -> list[str]:
  """"Where we differ and why" for a table of row groups: the checks per group, saying which,
  then the paper σ differences over every group's rows (none for `smoke` runs)."""
  spec = module.PAPER_TABLE
  lines = [f"- **Table {spec.number}** ({spec.title}):"]
  for part in groups:
    name = f"{part.number}. {part.spec.label} (`{part.folder}`"
    if part.runs is None:
      lines.append(f"  - {name}): not run yet.")
      continue
    checks = refined_checks(part.runs, part.table, module.HIGHER_IS_BETTER, "    ", "rows")
    lines.append(f"  - {name}; {', '.join(part.configuration[:2])}):"
                 + ("" if checks else " no refined VI run to check."))
    lines += checks
  if smoke:
    return lines + [SMOKE_DIFFERENCES]
  frames = [part.table for part in groups if part.table is not None]
  table = pd.concat(frames, ignore_index=True)
  datasets = order + sorted(set(table["dataset"]) - set(order))
  return lines + paper_differences(module, table, output_dir, datasets)
