"""How a cell of the report's paper tables reads: ours, the paper's, our distance in paper σ.

"mean ± std" at each metric's precision (accuracy in %, ELBOs in whole nats, MLLs to 3 or 4
places; the paper's values at the paper's own), typographic minus signs, the distance from the
paper in the paper's std (bold beyond BEYOND_SIGMA), and the same rows as a LaTeX table.
"""
from __future__ import annotations

import re
from typing import Optional

import pandas as pd

from report import table_checks, tables

BEYOND_SIGMA = 2.0   # a cell this many paper std from the paper's mean is listed under differences


def minus_sign(text: str) -> str:
  """Text with typographic minus signs (U+2212) for reading; the CSVs keep plain numbers."""
  return text.replace("-", "−")


def digits_of(mean: float, metric: str, paper: bool = False) -> int:
  """Decimal places: accuracy (in %) 2, ELBOs 0 (whole nats), MLLs 3, or 4 when |MLL| < 0.1.

  The paper's values keep the paper's own precision (3 places, accuracy 1 place in %).
  """
  if metric == "test_accuracy":
    return 1 if paper else 2
  if metric.startswith("elbo"):
    return 0
  return 3 if paper or abs(mean) >= 0.1 else 4


def mean_std_text(mean, std, metric: str, paper: bool = False) -> str:
  """"mean ± std" at the mean's precision (the std alone for one seed is missing: mean only); "–"
  when the runs did not record the metric."""
  if tables.missing(mean):
    return "–"
  scale, unit = (100, " %") if metric == "test_accuracy" else (1, "")
  digits = digits_of(mean, metric, paper)
  text = minus_sign(f"{scale * mean:,.{digits}f}")
  if not tables.missing(std):
    text += f" ± {scale * std:,.{digits}f}"
  return text + unit


def sigma_text(sigma: Optional[float]) -> str:
  """"+0.8σ"; bold beyond BEYOND_SIGMA (to 2 places if 1 would show the limit); "" for None."""
  if sigma is None:
    return ""
  beyond = table_checks.is_beyond(sigma, BEYOND_SIGMA)
  digits = 2 if beyond and round(abs(sigma), 1) == BEYOND_SIGMA else 1
  text = minus_sign(f"{sigma:+,.{digits}f}σ")
  return f"**{text}**" if beyond else text


def sigma_cell(row: pd.Series, metric: str, paper_stem: Optional[str],
               with_sigma: bool = True) -> str:
  """A paper-layout cell: ours, then (paper mean ± std, our distance from it in paper σ unless
  not `with_sigma`)."""
  ours = mean_std_text(row.get(f"{metric}_mean"), row.get(f"{metric}_std"), metric)
  paper_mean = row.get(f"paper_{paper_stem}_mean") if paper_stem else None
  if tables.missing(paper_mean):
    return ours
  paper_std = row.get(f"paper_{paper_stem}_std")
  paper = mean_std_text(paper_mean, paper_std, metric, paper=True)
  sigma = sigma_text(table_checks.paper_sigma(row.get(f"{metric}_mean"), paper_mean, paper_std)
                     ) if with_sigma else ""
  return f"{ours}<br>(paper {paper}{', ' + sigma if sigma else ''})"


def to_latex(header: list[str], rows: list[list[str]], caption: str) -> str:
  """A LaTeX table: each dataset is two rows, ours then the paper's (no package beyond LaTeX)."""
  def latex(text: str) -> str:
    text = text.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%")
    text = text.replace("−", "$-$").replace("±", "$\\pm$").replace("σ", "$\\sigma$")
    return re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", text)
  lines = ["\\begin{table}", "\\centering", "\\scriptsize",
           "\\begin{tabular}{l" + "c" * (len(header) - 1) + "}", "\\hline",
           " & ".join(latex(h) for h in header) + " \\\\", "\\hline"]
  for cells in rows:
    parts = [cell.split("<br>") for cell in cells]
    lines.append(" & ".join(latex(p[0]) for p in parts) + " \\\\")
    if any(len(p) > 1 for p in parts):
      lines.append(" & ".join(latex(p[1]) if len(p) > 1 else "" for p in parts) + " \\\\[2pt]")
  lines += ["\\hline", "\\end{tabular}", f"\\caption{{{latex(caption)}}}", "\\end{table}", ""]
  return "\n".join(lines)
