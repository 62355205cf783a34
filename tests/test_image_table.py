"""The LeNet-5 table: the paper's layout, the paper's numbers beside ours, the checks."""
from common.results import write_results
from report import image_table


def _write(root, method, seed, metrics):
  write_results(str(root / "mnist" / method / f"seed_{seed}"), benchmark="image", dataset="mnist",
                method=method, seed=seed, flags={}, metrics=metrics, timings={
                    "train_seconds": 100.0,
                    "refine_seconds": 30.0,
                    "total_seconds": 140.0
                })


def test_table_puts_the_paper_beside_ours_and_checks_the_claims(tmp_path):
  for seed, (elbo, elbo_aux) in enumerate([(-7600.0, -6300.0), (-7700.0, -7800.0)]):
    _write(tmp_path, "vi", seed, {
        "test_mll": -0.032,
        "test_accuracy": 0.991,
        "elbo": elbo,
        "ece": 0.01,
        "brier": 0.02
    })
    _write(tmp_path, "refined_vi", seed, {"test_mll": -0.026, "test_accuracy": 0.990, "elbo": elbo,
                                          "elbo_aux": elbo_aux, "ece": 0.01, "brier": 0.02})
  outputs = image_table.write_tables(str(tmp_path), str(tmp_path))
  markdown = (tmp_path / "table.md").read_text()
  assert ("| mnist | not run | not run | not run | not run | "
          "-0.032 ± 0.000<br>(-0.032 ± 0.001)" in markdown)
  assert "(-6,310.8 ± 42.4)" in markdown        # the paper's refined-VI ELBO
  checks = (tmp_path / "checks.md").read_text()
  assert "ELBO_aux >= ELBO (same run's VI model): 1 of 2 dataset-seed runs." in checks
  assert "fails: mnist seed 1: -7800.0 < -7700.0" in checks
  assert "Refined VI mean MLL >= VI mean MLL on 1 of 1 datasets" in checks
  assert "Refined VI mean Acc >= VI mean Acc on 0 of 1 datasets (not on: mnist)" in checks
  assert set(outputs["table"].columns) >= {"ece_mean", "brier_mean", "paper_accuracy_mean"}
  per_dataset, totals = image_table.timings(outputs["runs"])
  assert totals["mean_refine_to_vi_train_ratio"] == 0.3
