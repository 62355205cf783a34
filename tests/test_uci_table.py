"""The UCI table: paper layout, original-unit ELBOs, and the checks the issue asks for."""
import math
import os

import numpy as np
import pandas as pd
import pytest

from common.results import write_results
from uci import data, table

DATA = os.path.join(os.environ.get("REFINED_VI_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "..",
                                                                       "shared", "data")), "uci")
pytestmark = pytest.mark.skipif(not os.path.isdir(DATA), reason="the offline UCI copy is not here")


def _write(root, method, seed, metrics):
  flags = {"dataset": "yacht_hydrodynamics", "split": "random_80_20", "seed": seed, "data_dir": DATA}
  write_results(str(root / method / f"seed_{seed}"), benchmark="uci", dataset="yacht_hydrodynamics",
                method=method, seed=seed, flags=flags, metrics={"num_train": 246, **metrics},
                timings={"train_seconds": 10.0, "refine_seconds": 1.0, "total_seconds": 12.0})


def test_table_converts_elbos_to_original_units_and_checks_the_ordering(tmp_path):
  runs = [(-100.0, -90.0, -1.5, -1.4), (-110.0, -112.0, -1.7, -1.6)]
  for seed, (elbo, elbo_aux, vi_mll, refined_mll) in enumerate(runs):
    _write(tmp_path, "vi", seed, {"test_mll": vi_mll, "test_rmse": 1.0, "elbo": elbo})
    _write(tmp_path, "refined_vi", seed, {"test_mll": refined_mll, "test_rmse": 1.0, "elbo": elbo,
                                          "elbo_aux": elbo_aux})
  outputs = table.write_tables(str(tmp_path), str(tmp_path / "out"))
  features, targets = data.load("yacht_hydrodynamics", DATA, download_allowed=False)
  log_std = math.log(data.prepare(features, targets, seed=0).target_std)
  runs = outputs["runs"].set_index(["method", "seed"])
  np.testing.assert_allclose(runs.loc[("vi", 0), "elbo"], -100.0 - 246 * log_std, rtol=1e-9)
  np.testing.assert_allclose(runs.loc[("refined_vi", 0), "elbo_aux"] - runs.loc[("refined_vi", 0), "elbo"], 10.0)
  markdown = (tmp_path / "out" / "table.md").read_text()
  assert "| yacht_hydrodynamics |" in markdown and "(-1.626 ± 0.231)" in markdown   # the paper's refined MLL
  checks = (tmp_path / "out" / "checks.md").read_text()
  assert "ELBO_aux >= ELBO (same run's VI model): 1 of 2 dataset-seed runs." in checks
  assert "fails: yacht_hydrodynamics seed 1" in checks
  assert "Refined VI mean MLL >= VI mean MLL on 1 of 1 datasets" in checks


def test_weight_noise_comparison_pairs_runs_by_dataset_and_seed():
  from benchmarks.uci_weight_noise import compare
  index = pd.MultiIndex.from_tuples([("wine", 0), ("wine", 1), ("yacht", 0)], names=["dataset", "seed"])
  baseline = pd.DataFrame({"test_mll": [-1.0, -1.2, -0.5], "elbo_aux": [-10.0, -12.0, -5.0],
                           "refine_to_train": [0.2, 0.2, 0.3]}, index=index)
  variant = pd.DataFrame({"test_mll": [-0.9, -1.2, -0.6], "elbo_aux": [-11.0, -14.0, -5.0],
                          "refine_to_train": [0.1, 0.1, 0.1]},
                         index=pd.MultiIndex.from_tuples([("wine", 1), ("wine", 0), ("yacht", 0)],
                                                         names=["dataset", "seed"]))
  table = compare(baseline, variant)
  assert table.loc["wine", "seeds"] == 2 and table.loc["yacht", "seeds"] == 1
  # Paired by seed, not by row order: wine differences are (-1.2 - -1.0, -0.9 - -1.2) = (-0.2, +0.3).
  assert table.loc["wine", "test_mll_difference"] == pytest.approx(0.05)
  assert table.loc["wine", "test_mll_difference_se"] == pytest.approx(np.std([-0.2, 0.3], ddof=1) / np.sqrt(2))
  assert table.loc["wine", "elbo_aux_difference"] == pytest.approx(-1.5)   # (-14 - -10, -11 - -12)
  assert table.loc["yacht", "refine_to_train_per_batch"] == pytest.approx(0.1)
  with pytest.raises(ValueError, match="no \\(dataset, seed\\) in common"):
    compare(baseline.iloc[:1], variant.iloc[2:])
