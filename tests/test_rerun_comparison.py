"""report.uci_rerun_comparison: seed-for-seed differences between two runs of the UCI table."""
import numpy as np
import pandas as pd
import pytest

from report import uci_rerun_comparison


def _table(shift: float) -> pd.DataFrame:
  """Two datasets x the three VI-family methods x 4 seeds; `shift` moves boston's refined MLL."""
  rng = np.random.default_rng(0)
  rows = []
  for dataset, base in (("boston_housing", -2.5), ("yacht_hydrodynamics", -1.0)):
    for method, gain in (("vi", 0.0), ("vi_equal_compute", 0.01), ("refined_vi", 0.05)):
      for seed in range(4):
        mll = base + gain + 0.01 * seed + (shift if (dataset, method) == ("boston_housing",
                                                                            "refined_vi") else 0)
        rows.append({"dataset": dataset, "method": method, "seed": seed, "test_mll": mll,
                     "test_rmse": 1.0, "elbo": -100.0 + rng.normal(),
                     "elbo_aux": -90.0 if method == "refined_vi" else np.nan})
  return pd.DataFrame(rows)


def test_paired_differences_are_after_minus_before_per_dataset_and_method():
  table = uci_rerun_comparison.paired_differences(_table(0.0), _table(-0.2)).set_index(
      ["dataset", "method"])
  assert table.loc[("boston_housing", "refined_vi"), "test_mll_difference"] == pytest.approx(-0.2)
  assert table.loc[("boston_housing", "refined_vi"), "test_mll_difference_se"] == pytest.approx(0)
  assert table.loc[("yacht_hydrodynamics", "vi"), "test_mll_difference"] == pytest.approx(0)
  assert set(table["seeds"]) == {4}


def test_conclusions_count_what_the_table_claims():
  assert uci_rerun_comparison.conclusions(_table(0.0)) == {
      "datasets": 2, "refined_vi_above_vi": 2, "refined_vi_above_equal_compute": 2,
      "refined_runs": 8, "refined_runs_elbo_aux_above_elbo": 8}
  # Boston's refined VI pushed below both: one dataset loses both claims.
  shifted = uci_rerun_comparison.conclusions(_table(-0.2))
  assert shifted["refined_vi_above_vi"] == 1 and shifted["refined_vi_above_equal_compute"] == 1


def test_tables_without_common_runs_are_refused():
  other = _table(0.0).assign(seed=lambda frame: frame["seed"] + 10)
  with pytest.raises(ValueError, match="no \\(dataset, method, seed\\) run in common"):
    uci_rerun_comparison.paired_differences(_table(0.0), other)


def test_conclusions_count_refined_vogn_against_vogn():
  """The bug it catches: a VOGN rerun compared with only the VI table's claims, so refinement
  falling below VOGN would pass unseen."""
  vogn = _table(0.0).replace({"method": {"vi": "vogn", "refined_vi": "refined_vogn"}})
  vogn = vogn[vogn["method"] != "vi_equal_compute"]
  assert uci_rerun_comparison.conclusions(vogn) == {
      "datasets": 2, "refined_vogn_above_vogn": 2, "refined_vogn_runs": 8,
      "refined_vogn_runs_elbo_aux_above_elbo": 8}
  vogn.loc[(vogn.dataset == "boston_housing") & (vogn.method == "refined_vogn"), "test_mll"] -= 1
  assert uci_rerun_comparison.conclusions(vogn)["refined_vogn_above_vogn"] == 1
