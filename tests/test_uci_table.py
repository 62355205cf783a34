"""The UCI table: paper layout, original-unit ELBOs from each run's target_std, the checks."""
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from backfill import uci_calibration_error as backfill
from common.results import write_results
from report import uci_related_table, uci_table
from uci import data, regression


def _write(root, method, seed, metrics, dataset="yacht_hydrodynamics"):
  write_results(str(root / dataset / method / f"seed_{seed}"), benchmark="uci", dataset=dataset,
                method=method, seed=seed, flags={"dataset": dataset, "seed": seed},
                metrics={"num_train": 246, "target_std": 15.0, **metrics},
                timings={"train_seconds": 10.0, "refine_seconds": 1.0, "total_seconds": 12.0})


@pytest.fixture(autouse=True)
def no_data(monkeypatch):
  """The table reads results.json only: any dataset access fails the test."""
  def refuse(*args, **kwargs):
    raise AssertionError("the UCI table must not load a dataset")
  for name in ("load", "num_standard_splits", "prepare"):
    monkeypatch.setattr(data, name, refuse)


def test_elbos_change_units_with_each_runs_recorded_target_std(tmp_path):
  _write(tmp_path, "vi", 0, {"test_mll": -1.0, "elbo": -100.0, "num_train": 10,
                             "target_std": math.e})
  _write(tmp_path, "refined_vi", 1, {"test_mll": -1.0, "elbo": -50.0, "elbo_aux": -40.0,
                                     "num_train": 20, "target_std": 0.5})
  runs = uci_table.load_runs(str(tmp_path)).set_index(["method", "seed"])
  # ELBO_original = ELBO_standardised - N_train * log(target_std).
  assert runs.loc[("vi", 0), "elbo"] == pytest.approx(-100.0 - 10 * 1.0)
  assert runs.loc[("vi", 0), "elbo_standardised"] == -100.0
  assert runs.loc[("refined_vi", 1), "elbo"] == pytest.approx(-50.0 + 20 * math.log(2.0))
  assert runs.loc[("refined_vi", 1), "elbo_aux"] == pytest.approx(-40.0 + 20 * math.log(2.0))


def test_a_run_without_target_std_is_an_error_naming_its_file(tmp_path):
  _write(tmp_path, "vi", 0, {"test_mll": -1.0, "elbo": -100.0})
  _write(tmp_path, "deep_ensemble", 0, {"test_mll": -1.0}, dataset="wine")
  path = tmp_path / "wine" / "deep_ensemble" / "seed_0" / "results.json"
  run = path.read_text().replace('"target_std": 15.0', '"other": 1.0')
  path.write_text(run)
  message = f"^{re.escape(str(path))}: metrics has no target_std"
  with pytest.raises(ValueError, match=message) as error:
    uci_table.load_runs(str(tmp_path))
  assert "\n" not in str(error.value)


def test_table_converts_elbos_to_original_units_and_checks_the_ordering(tmp_path):
  runs = [(-100.0, -90.0, -1.5, -1.4), (-110.0, -112.0, -1.7, -1.6)]
  for seed, (elbo, elbo_aux, vi_mll, refined_mll) in enumerate(runs):
    _write(tmp_path, "vi", seed, {"test_mll": vi_mll, "test_rmse": 1.0, "elbo": elbo})
    _write(tmp_path, "refined_vi", seed, {"test_mll": refined_mll, "test_rmse": 1.0, "elbo": elbo,
                                          "elbo_aux": elbo_aux})
  outputs = uci_table.write_tables(str(tmp_path), str(tmp_path / "out"))
  runs = outputs["runs"].set_index(["method", "seed"])
  np.testing.assert_allclose(runs.loc[("vi", 0), "elbo"], -100.0 - 246 * math.log(15.0), rtol=1e-9)
  elbo_gain = runs.loc[("refined_vi", 0), "elbo_aux"] - runs.loc[("refined_vi", 0), "elbo"]
  np.testing.assert_allclose(elbo_gain, 10.0)
  markdown = (tmp_path / "out" / "table.md").read_text()
  assert "| yacht_hydrodynamics |" in markdown
  assert "(-1.626 ± 0.231)" in markdown   # the paper's refined MLL
  checks = (tmp_path / "out" / "checks.md").read_text()
  assert "ELBO_aux >= ELBO (same run's VI model): 1 of 2 dataset-seed runs." in checks
  assert "fails: yacht_hydrodynamics seed 1" in checks
  assert "Refined VI mean MLL >= VI mean MLL on 1 of 1 datasets" in checks
  per_dataset, totals = uci_table.timings(outputs["runs"])
  assert totals["num_runs"] == 4 and totals["mean_refine_to_vi_train_ratio"] == pytest.approx(0.1)


def test_weight_noise_comparison_pairs_runs_by_dataset_and_seed():
  from benchmarks.uci_weight_noise import compare
  index = pd.MultiIndex.from_tuples([("wine", 0), ("wine", 1), ("yacht", 0)],
                                    names=["dataset", "seed"])
  baseline = pd.DataFrame({"test_mll": [-1.0, -1.2, -0.5], "elbo_aux": [-10.0, -12.0, -5.0],
                           "refine_to_train": [0.2, 0.2, 0.3]}, index=index)
  variant = pd.DataFrame({"test_mll": [-0.9, -1.2, -0.6], "elbo_aux": [-11.0, -14.0, -5.0],
                          "refine_to_train": [0.1, 0.1, 0.1]},
                         index=pd.MultiIndex.from_tuples([("wine", 1), ("wine", 0), ("yacht", 0)],
                                                         names=["dataset", "seed"]))
  table = compare(baseline, variant)
  assert table.loc["wine", "seeds"] == 2 and table.loc["yacht", "seeds"] == 1
  # Paired by seed, not by row order: wine differences are
  # (-1.2 - -1.0, -0.9 - -1.2) = (-0.2, +0.3).
  assert table.loc["wine", "test_mll_difference"] == pytest.approx(0.05)
  assert table.loc["wine", "test_mll_difference_se"] == pytest.approx(
      np.std([-0.2, 0.3], ddof=1) / np.sqrt(2))
  assert table.loc["wine", "elbo_aux_difference"] == pytest.approx(-1.5)   # (-14 - -10, -11 - -12)
  assert table.loc["yacht", "refine_to_train_per_batch"] == pytest.approx(0.1)
  with pytest.raises(ValueError, match="no \\(dataset, seed\\) run in common"):
    compare(baseline.iloc[:1], variant.iloc[2:])


def test_calibration_error_is_copied_only_from_a_rerun_that_reproduces_the_run(tmp_path,
                                                                                monkeypatch):
  """The bug it catches: a backfilled calibration_error from a rerun that is not the committed
  run (other settings, or any metric off by one ulp), which would put a number beside results
  it was never computed with. Such a rerun leaves the file untouched and is named."""
  monkeypatch.chdir(tmp_path)
  flags = {"dataset": "wine", "method": "vi", "seed": 0, "vi_steps": 30000}
  metrics = {"test_mll": -1.0, "elbo": -100.0, "num_train": 10, "target_std": 1.0}

  def run(root, run_flags, run_metrics):
    write_results(f"{root}/uci/wine/vi/seed_0", benchmark="uci", dataset="wine", method="vi",
                  seed=0, flags=run_flags, metrics=run_metrics, timings={})
    return f"{root}/uci/wine/vi/seed_0/results.json"

  committed = run("results", flags, metrics)
  before = open(committed).read()
  rerun = f"rerun/{committed}"
  assert backfill.backfill(committed, rerun, "note") == "no rerun"
  run("rerun/results", flags, {"elbo": -100.0, "num_train": 10, "target_std": 1.0,
                               "calibration_error": 0.1})
  assert backfill.backfill(committed, rerun, "note") == [
      "test_mll (the rerun does not record it)"]
  run("rerun/results", {**flags, "vi_steps": 20000}, {**metrics, "calibration_error": 0.1})
  assert backfill.backfill(committed, rerun, "note") == ["--vi_steps"]
  run("rerun/results", flags, {**metrics, "test_mll": np.nextafter(-1.0, 0.0),
                               "calibration_error": 0.1})
  assert backfill.backfill(committed, rerun, "note") == [
      "test_mll -1.0 (rerun: -0.9999999999999999)"]
  assert open(committed).read() == before
  run("rerun/results", flags, {**metrics, "calibration_error": 0.1})
  assert backfill.backfill(committed, rerun, "note") == "added"
  record = json.load(open(committed))
  assert record["metrics"] == {**metrics, "calibration_error": 0.1}
  assert record["backfilled"]["metrics.calibration_error"].startswith("note from a rerun at ")
  assert backfill.backfill(committed, rerun, "note") == "recorded"


def test_the_calibration_note_gives_each_datasets_floor_and_refuses_mixed_splits():
  """The bug it catches: a floor from some other run's test size (one value taken per dataset
  whatever the runs hold), which a table mixing split protocols would state wrongly."""
  runs = pd.DataFrame({"dataset": ["boston_housing", "boston_housing", "yacht_hydrodynamics"],
                       "num_test": [101, 101, 62]})
  note = uci_related_table.calibration_note(runs)
  assert (f"boston_housing {regression.calibration_error_floor(101):.3f}, "
          f"yacht_hydrodynamics {regression.calibration_error_floor(62):.3f}.") in note
  with pytest.raises(ValueError, match="boston_housing have test splits of different sizes"):
    uci_related_table.calibration_note(runs.assign(num_test=[101, 51, 62]))
