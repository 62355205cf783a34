"""Table 3 as row groups: the evidence folders a benchmark names, each its own labelled group.

Fake ResNet-20 runs in the layouts the real ones use: the 60,000-image main evidence under
results/resnet_fashion_mnist_60k/resnet/..., the first evidence under results/resnet/, and
ablation folders under results/ablations/ that the default loader skips.
"""
import os

from common import results_loader
from common.results import write_results

# The flags resnet.main records, at the first evidence's settings.
SUBSET_FLAGS = {"num_train_examples": 8000, "epochs": 10.0, "num_auxiliary": 5,
                "steps_per_auxiliary": 10, "num_samples": 10, "num_eval_samples": 0,
                "ensemble_members": 3, "initial_untransformed_posterior_scale": -7.0,
                "batchnorm": True}


def _run(folder, method, seed=0, variant="hybrid", mll=-0.45, elbo=-9e5, elbo_aux=None,
         num_train=8000, **flags):
  """A results.json of one ResNet-20 run in `folder`: its recorded flags and metrics."""
  metrics = {"test_mll": mll, "test_accuracy": 0.84, "num_train": num_train}
  if method != "deep_ensemble":
    metrics["elbo"] = elbo
  if elbo_aux is not None:
    metrics["elbo_aux"] = elbo_aux
  write_results(str(folder), benchmark="resnet", dataset="fashion_mnist", method=method,
                seed=seed, flags={**SUBSET_FLAGS, "variational": variant, **flags},
                metrics=metrics, timings={"total_seconds": 600.0})


def test_load_evidence_reads_named_folders_below_ablations_and_gives_a_run_to_the_deepest(
    tmp_path):
  """A named folder is read even below ablations/ (smoke below it is still skipped); a run under
  two named folders belongs to the deeper one; the default loader still skips ablations."""
  outer = tmp_path / "ablations" / "outer"
  _run(outer / "a" / "vi" / "seed_0", "vi")
  _run(outer / "inner" / "vi" / "seed_0", "vi")
  _run(outer / "smoke" / "vi" / "seed_0", "vi")
  evidence = results_loader.load_evidence(
      str(tmp_path), ["ablations/outer", "ablations/outer/inner", "absent"], "resnet")
  relative = {folder: [os.path.relpath(run.path, tmp_path) for run in runs]
              for folder, runs in evidence.items()}
  assert relative == {
      "ablations/outer": [os.path.join("ablations", "outer", "a", "vi", "seed_0", "results.json")],
      "ablations/outer/inner": [os.path.join("ablations", "outer", "inner", "vi", "seed_0",
                                             "results.json")],
      "absent": []}
  assert results_loader.load_runs(str(tmp_path)) == []
