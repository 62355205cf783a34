"""benchmarks.uci_run_time: a whole UCI run per loop setting, split into its parts."""
import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(name="uci_flags")
def _uci_flags(data_dir_for):
  """The UCI binary's tiny settings on yacht, as --uci_flags takes them."""
  return ",".join([f"--data_dir={data_dir_for('yacht_hydrodynamics')}", "--hidden_units=8",
                   "--vi_steps=200", "--num_samples=2", "--num_auxiliary=2",
                   "--steps_per_auxiliary=20", "--elbo_num_samples=1",
                   "--steps_per_checkpoint=50"])


def test_every_variant_runs_the_binary_and_its_parts_add_up(tmp_path, uci_flags):
  """One round at tiny scale. The default (XLA) with and without the cache computes the same
  numbers (catches a cache that hands a run another computation), and so does a refinement
  prepared beside VI and one traced when it starts; every part of the wall time is positive
  (catches refinement's stage estimates counted twice, which the rest pays for), and so is each
  loop's set-up, a part of its loop's time, or a prepared refinement's time beside VI."""
  completed = subprocess.run(
      [sys.executable, "-m", "benchmarks.uci_run_time", "--rounds=1",
       "--dataset=yacht_hydrodynamics", f"--output_dir={tmp_path}", f"--uci_flags={uci_flags}"],
      capture_output=True, text=True, check=False, cwd=REPO)
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((tmp_path / "speed.json").read_text())["results"]
  assert set(results) == {"default", "not_prepared", "tensorflow_threads", "compiled_refinement",
                          "compiled_refinement_not_prepared", "xla_cached",
                          "xla_cached_compiled_refinement", "uncompiled"}
  assert results["xla_cached"]["test_mll"] == results["default"]["test_mll"]
  # refined_vi's one thread by default, TensorFlow's choice (recorded as 0) when asked.
  assert (results["default"]["intra_op_threads"], results["tensorflow_threads"]["intra_op_threads"]
          ) == (1, 0)
  assert results["not_prepared"]["test_mll"] == results["default"]["test_mll"]
  assert (results["compiled_refinement_not_prepared"]["test_mll"]
          == results["compiled_refinement"]["test_mll"])
  assert (results["xla_cached_compiled_refinement"]["test_mll"]
          == results["compiled_refinement"]["test_mll"])
  assert results["compiled_refinement"]["test_mll"] == pytest.approx(
      results["default"]["test_mll"], abs=1e-4)
  for variant, row in results.items():
    for part in ("startup_seconds", "train_seconds", "refine_seconds", "other_seconds"):
      assert 0 < row[part] < row["wall_seconds"], (part, row)
    # The first of VI's 4 chunks and of refinement's 2 stages trace (and compile) the loop,
    # unless the refinement was prepared beside VI (on the second thread, within VI's time).
    assert 0 < row["train_setup_seconds"] < row["train_seconds"], row
    if variant.endswith("not_prepared"):
      assert 0 < row["refine_setup_seconds"] < row["refine_seconds"], row
      assert math.isnan(row["refine_prepare_seconds"]), row
    else:
      assert row["refine_prepare_seconds"] > 0, row
  assert "| xla_cached |" in (tmp_path / "speed.md").read_text()


def test_a_subset_of_variants_runs_only_those_and_an_unknown_one_is_refused(tmp_path,
                                                                           uci_flags):
  """Catches --variants ignored (every variant run: minutes instead of one run), a mistyped
  variant silently dropped, or a repeated one timed on the first's finished output."""
  command = [sys.executable, "-m", "benchmarks.uci_run_time", "--rounds=1",
             "--dataset=yacht_hydrodynamics", f"--uci_flags={uci_flags}"]
  for variants in ("default,defualt", "uncompiled,uncompiled"):   # a repeat reran nothing
    completed = subprocess.run(command + [f"--variants={variants}",
                                          f"--output_dir={tmp_path / 'refused'}"],
                               capture_output=True, text=True, check=False, cwd=REPO)
    assert completed.returncode == 2
    assert f"--variants={variants}: allowed: one or more of default," in (
        completed.stderr.strip().splitlines()[-1])
    assert not (tmp_path / "refused").exists()
  completed = subprocess.run(command + ["--variants=uncompiled", f"--output_dir={tmp_path}"],
                             capture_output=True, text=True, check=False, cwd=REPO)
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((tmp_path / "speed.json").read_text())["results"]
  assert list(results) == ["uncompiled"] and results["uncompiled"]["wall_seconds"] > 0
