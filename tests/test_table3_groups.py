"""Table 3 as row groups: the evidence folders a benchmark names, each its own labelled group.

Fake ResNet-20 runs in the layouts the real ones use: the 60,000-image main evidence under
results/resnet_fashion_mnist_60k/resnet/..., the first evidence under results/resnet/, and
ablation folders under results/ablations/ that the default loader skips.
"""
import dataclasses
import os

import pytest

from common.results import write_results
from report import main as report
from report import paper_comparison, resnet_table, results_loader
from report.paper_comparison import EvidenceGroup

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


def _name_evidence(monkeypatch, groups):
  """Table 3 as if resnet_table named these evidence folders."""
  monkeypatch.setattr(resnet_table, "PAPER_TABLE",
                      dataclasses.replace(resnet_table.PAPER_TABLE, evidence=groups))


def _table3(text):
  return text.split("## Table 3")[1].split("## Figure 5")[0]


def _group(table3, number):
  """The text of group `number` of Table 3, from its heading to the next group's."""
  start = table3.index(f"**{number}. ")
  end = table3.find(f"**{number + 1}. ", start)
  return table3[start:end if end >= 0 else len(table3)]


@pytest.fixture
def results(tmp_path):
  """The first evidence (8,000 images, seed 0), the 60,000-image main evidence (seeds 0 and 1,
  K = 10, a 5-member ensemble), the 100-epoch ablation and the refinement ablation with its
  softplus(-4) subfolder, which Table 3 names as a group of its own."""
  root = tmp_path / "results"
  first = root / "resnet" / "fashion_mnist" / "hybrid_bn"
  _run(first / "vi" / "seed_0", "vi", mll=-0.447)
  _run(first / "refined_vi" / "seed_0", "refined_vi", mll=-0.477, elbo_aux=-8.9e5)
  main = root / "resnet_fashion_mnist_60k" / "resnet" / "fashion_mnist" / "hybrid_bn"
  for seed, (vi_mll, refined_mll) in enumerate([(-0.26, -0.24), (-0.28, -0.22)]):
    flags = {"num_train_examples": 0, "num_auxiliary": 10, "ensemble_members": 5}
    _run(main / "vi" / f"seed_{seed}", "vi", seed, mll=vi_mll, num_train=60000, **flags)
    _run(main / "refined_vi" / f"seed_{seed}", "refined_vi", seed, mll=refined_mll,
         elbo_aux=-8e5, num_train=60000, **flags)
    _run(main / "deep_ensemble" / f"seed_{seed}", "deep_ensemble", seed, mll=-0.2,
         num_train=60000, **flags)
  schedule = root / "ablations" / "resnet_fashion_mnist_schedule" / "fashion_mnist" / "hybrid_bn"
  _run(schedule / "vi" / "seed_0", "vi", mll=-0.621, epochs=100.0)
  _run(schedule / "refined_vi" / "seed_0", "refined_vi", mll=-0.528, elbo_aux=-5.9e5,
       epochs=100.0)
  refinement = root / "ablations" / "resnet_fashion_mnist_refinement"
  _run(refinement / "hybrid_bn_scale_-4" / "vi" / "seed_0", "vi", mll=-0.500,
       initial_untransformed_posterior_scale=-4.0)
  _run(refinement / "hybrid_bn" / "refined_vi_refit" / "seed_0", "refined_vi", mll=-0.504,
       elbo_aux=-9.17e5)
  return root


def test_named_folders_are_row_groups_in_order_and_the_main_evidence_is_not_mixed(results,
                                                                                   tmp_path):
  """Every folder Table 3 names is its own labelled group, in the stated order, with only its own
  runs; the folder without runs (all_images here) is listed as not run yet.

  Bugs it catches (each planted and seen to fail): Table 3 read through the default loader, which
  skips every `ablations/` folder and averages the 60,000-image runs into the 8,000-image rows
  (both are "fashion_mnist hybrid_bn", seed 0); and a run under two named folders counted in both
  (the softplus(-4) VI appearing among the refinement variants too).
  """
  text = open(report.write_report(str(results), str(tmp_path / "report"))).read()
  table3 = _table3(text)
  labels = [group.label for group in resnet_table.EVIDENCE_GROUPS]
  positions = [table3.index(f"**{number}. {label}**") for number, label in enumerate(labels, 1)]
  assert positions == sorted(positions)
  main, all_images, first, schedule, scale, variants = (_group(table3, n) for n in range(1, 7))
  assert main.startswith(f"**1. {labels[0]}**: 60,000 training images")
  # The main evidence: the mean over its seeds 0 and 1, nothing from the 8,000-image runs.
  assert ("| fashion_mnist hybrid_bn | −0.200 ± 0.000 | 84.00 ± 0.00 % | −0.270 ± 0.014 |"
          in main)
  assert "| −0.230 ± 0.014 |" in main and "Machine time: 1.0 h over 6 runs." in main
  assert all_images.startswith(f"**2. {labels[1]}** (`{results}/ablations/"
                               "resnet_fashion_mnist_all_images`): not run yet.")
  assert "| fashion_mnist hybrid_bn | not run | not run | −0.447 | 84.00 % |" in first
  assert "−0.477 | 84.00 %" in first and "Every cell is one seed (no ± std)." in first
  assert "| fashion_mnist hybrid_bn | not run | not run | −0.621 |" in schedule   # an ablation
  assert "−0.500" in scale and "softplus(−4)" in scale and "refined_vi_refit" not in scale
  assert "| hybrid_bn/refined_vi_refit |" in variants and "−0.500" not in variants
  assert "softplus(−4)" not in variants
  # The paper's CIFAR-10 rows are still listed as not run.
  assert "Not run yet: resnet, resnet_batchnorm, resnet_hybrid, resnet_hybrid_batchnorm." in table3
  # The intro's count is the default loader's: the ablations are shown in Table 3, not counted.
  assert "from 8 results.json files" in text


def test_the_configuration_line_is_read_from_each_groups_recorded_flags(tmp_path, monkeypatch):
  """A group's heading gives the settings its runs recorded, every value where they differ.

  Bug it catches (planted and seen to fail): a configuration line written for the committed
  runs (8,000 images, 10 epochs, K = 5, ...) instead of read from each group's flags.
  """
  odd = tmp_path / "odd"
  for seed in (2, 5):
    _run(odd / "vi" / f"seed_{seed}", "vi", seed, num_train=12345, epochs=7.0, num_samples=6,
         initial_untransformed_posterior_scale=-5.5)
    _run(odd / "refined_vi" / f"seed_{seed}", "refined_vi", seed, elbo_aux=-8e5, num_train=12345,
         epochs=7.0, num_auxiliary=3, steps_per_auxiliary=4, num_samples=6,
         initial_untransformed_posterior_scale=-5.5)
  _run(odd / "deep_ensemble" / "seed_2", "deep_ensemble", 2, num_train=12345, epochs=7.0,
       ensemble_members=4)
  mixed = tmp_path / "mixed"
  _run(mixed / "a" / "refined_vi" / "seed_0", "refined_vi", elbo_aux=-8e5, steps_per_auxiliary=0)
  _run(mixed / "b" / "refined_vi" / "seed_0", "refined_vi", elbo_aux=-8e5)
  _run(mixed / "b" / "vi" / "seed_0", "vi", num_eval_samples=1)
  only_vi = tmp_path / "only_vi"
  _run(only_vi / "vi" / "seed_0", "vi")
  _name_evidence(monkeypatch, (
      EvidenceGroup("odd", "Odd settings"), EvidenceGroup("mixed", "Mixed settings"),
      EvidenceGroup("only_vi", "VI only")))
  markdown = paper_comparison.table_report(resnet_table, str(tmp_path),
                                           str(tmp_path / "report")).markdown
  assert (f"**1. Odd settings**: 12,345 training images, 7 epochs, K = 3, T = 4, M = 6, "
          f"ensembles of 4, seeds 2 and 5, initial posterior scale softplus(−5.5) "
          f"(`{tmp_path}/odd`).") in markdown
  assert ("**2. Mixed settings**: 8,000 training images, 10 epochs, K = 5, T = 0/10, M = 1/10, "
          "seed 0, initial posterior scale softplus(−7)") in markdown
  assert ("**3. VI only**: 8,000 training images, 10 epochs, no refinement, M = 10, seed 0, "
          "initial posterior scale softplus(−7)") in markdown


def test_where_we_differ_checks_each_group_and_names_it(tmp_path, monkeypatch):
  """ELBO_aux >= ELBO and refined VI >= VI are counted per group, under the group's name: a
  failure in one group is not credited to, or hidden by, another."""
  worse = tmp_path / "worse" / "fashion_mnist" / "hybrid_bn"
  _run(worse / "vi" / "seed_0", "vi", mll=-0.40, elbo=-9e5)
  _run(worse / "refined_vi" / "seed_0", "refined_vi", mll=-0.45, elbo=-9e5, elbo_aux=-9.1e5)
  better = tmp_path / "better" / "fashion_mnist" / "full_bn"
  _run(better / "vi" / "seed_0", "vi", variant="full", mll=-0.60)
  _run(better / "refined_vi" / "seed_0", "refined_vi", variant="full", mll=-0.50, elbo_aux=-8e5)
  _name_evidence(monkeypatch, (
      EvidenceGroup("better", "Where it helps"), EvidenceGroup("absent", "Still running"),
      EvidenceGroup("worse", "Where it does not", "Refinement hurts here.")))
  table = paper_comparison.table_report(resnet_table, str(tmp_path), str(tmp_path / "report"))
  lines = table.differences
  at = {line.strip()[:4]: i for i, line in enumerate(lines) if line.startswith("  - ")}
  assert lines[at["- 1."]].startswith(f"  - 1. Where it helps (`{tmp_path}/better`; 8,000 "
                                      "training images, 10 epochs):")
  assert lines[at["- 1."] + 1:at["- 2."]] == [
      "    - ELBO_aux ≥ ELBO in 1 of 1 refined VI runs.",
      "    - Refined VI's mean MLL ≥ VI's on 1 of 1 rows.",
      "    - Refined VI's mean Acc ≥ VI's on 1 of 1 rows."]
  assert lines[at["- 2."]] == f"  - 2. Still running (`{tmp_path}/absent`): not run yet."
  assert lines[at["- 3."] + 1:at["- 3."] + 3] == [
      "    - ELBO_aux ≥ ELBO in 0 of 1 refined VI runs (not: fashion_mnist hybrid_bn seed 0).",
      "    - Refined VI's mean MLL ≥ VI's on 0 of 1 rows (not: fashion_mnist hybrid_bn)."]
  assert "What it shows: Refinement hurts here." in table.markdown
  assert "**2. Still running** (`" in table.markdown and "): not run yet." in table.markdown


def test_no_named_folder_with_runs_means_no_table(tmp_path, monkeypatch):
  """Table 3 with none of its folders run is left out (the report lists it as not run yet), even
  when other ResNet-20 runs lie elsewhere under the results directory."""
  _run(tmp_path / "elsewhere" / "vi" / "seed_0", "vi")
  _name_evidence(monkeypatch, (EvidenceGroup("absent", "Still running"),))
  assert paper_comparison.table_report(resnet_table, str(tmp_path),
                                       str(tmp_path / "report")) is None


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
