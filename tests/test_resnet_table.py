"""The ResNet-20 table: the paper's variant rows, ensembles shared by batch-norm setting, checks."""
from common.results import write_results
from report import resnet_table


def _write(root, dataset, variant, method, seed, metrics):
  flags = {"variational": variant.split("_")[0], "batchnorm": variant.endswith("_bn")}
  write_results(str(root / dataset / variant / method / f"seed_{seed}"), benchmark="resnet",
                dataset=dataset, method=method, seed=seed, flags=flags, metrics=metrics,
                timings={"train_seconds": 100.0, "refine_seconds": 30.0, "total_seconds": 140.0})


def test_table3_rows_take_the_papers_variants_and_share_the_ensemble(tmp_path):
  for variant, shift in (("hybrid_bn", 0.0), ("full_bn", -0.2)):
    _write(tmp_path, "cifar10", variant, "vi", 0,
           {"test_mll": -0.47 + shift, "test_accuracy": 0.84, "elbo": -9000.0})
    _write(tmp_path, "cifar10", variant, "refined_vi", 0,
           {"test_mll": -0.42 + shift, "test_accuracy": 0.85, "elbo": -9000.0,
            "elbo_aux": -8000.0})
    _write(tmp_path, "cifar10", variant, "vi_equal_compute", 0,
           {"test_mll": -0.40 + shift, "test_accuracy": 0.85, "elbo": -8900.0})
  _write(tmp_path, "cifar10", "hybrid_bn", "deep_ensemble", 0,
         {"test_mll": -0.56, "test_accuracy": 0.836})
  _write(tmp_path, "fashion_mnist", "hybrid_bn", "vi", 0,
         {"test_mll": -0.3, "test_accuracy": 0.9, "elbo": -5000.0})
  outputs = resnet_table.write_tables(str(tmp_path), str(tmp_path))
  markdown = (tmp_path / "table.md").read_text()
  hybrid_row = next(line for line in markdown.splitlines()
                    if line.startswith("| resnet_hybrid_batchnorm |"))
  assert "-0.560<br>(-0.561)" in hybrid_row and "-0.420<br>(-0.423)" in hybrid_row
  full_row = next(line for line in markdown.splitlines()
                  if line.startswith("| resnet_batchnorm |"))
  assert "-0.560<br>(-0.561)" in full_row     # the batch-norm ensemble, shared
  assert "| fashion_mnist hybrid_bn | not run | not run | -0.300<br>(–)" in markdown
  checks = (tmp_path / "checks.md").read_text()
  assert "Refined VI mean MLL >= VI (equal compute) mean MLL on 0 of 2 rows" in checks
  assert "- VI: hybrid mean MLL >= full on 1 of 1 pairs" in checks
  assert "ELBO_aux >= ELBO (same run's VI model): 2 of 2" in checks
  assert len(outputs["runs"]) == 9


def test_machine_time_counts_every_process_of_a_resumed_run():
  """Catches the machine time of a run resumed across sessions counted as its last process only
  (the 60,000-image VI run: 2.9 h recorded by the last process, 4.2 h of training and evaluation
  in all), and the VI training that refined VI resumes from counted a second time."""
  import pandas as pd
  from report import table_checks
  runs = pd.DataFrame([
      # vi: trained from scratch over two processes (resumed at step 800).
      {"method": "vi", "vi_resumed_from_step": 800, "total_seconds": 10_000.0,
       "train_seconds": 14_000.0, "evaluate_seconds": 500.0},
      # refined_vi: resumes VI's finished fit (its train_seconds is VI's), refines in one process.
      {"method": "refined_vi", "vi_resumed_from_step": 2_344, "total_seconds": 3_000.0,
       "train_seconds": 14_000.0, "evaluate_seconds": 500.0},
      # deep_ensemble: one process from scratch.
      {"method": "deep_ensemble", "deep_ensemble_resumed_from_step": 0, "total_seconds": 6_000.0,
       "train_seconds": 5_500.0, "evaluate_seconds": 300.0},
  ])
  assert table_checks.machine_time(runs) == (14_500.0 + 3_000.0 + 6_000.0, 3)
