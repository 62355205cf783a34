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


def test_the_variants_run_the_binary_and_their_parts_add_up(tmp_path, monkeypatch, uci_flags):
  """One round at tiny scale of the variants that exercise the benchmark's own paths: a
  refinement traced when it starts, and one prepared beside VI in a run from the XLA cache that
  an untimed run filled (the default variant is that run without the cache). Both compute the
  same numbers (catches a cache that hands a run another computation); every part of the wall
  time is positive (catches refinement's stage estimates counted twice, which the rest pays
  for), and so is each loop's set-up, a part of its loop's time, or a prepared refinement's time
  beside VI. $TF_NUM_INTRAOP_THREADS is set, as
  run_table.sh's parallel jobs set it: the runs must not see it (refined_vi's one thread).

  The other variants only add binary flags, whose runs tests/test_uci_main.py checks:
  --jit_compile_refinement against the default, and a rerun from the cache, to round-off;
  --intra_op_threads=0 (tensorflow_threads) in its thread test; a refiner prepared on another
  thread under XLA equals a fresh one (tests/test_refine.py)."""
  monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "2")
  completed = subprocess.run(
      [sys.executable, "-m", "benchmarks.uci_run_time", "--rounds=1",
       "--dataset=yacht_hydrodynamics", "--variants=not_prepared,xla_cached",
       f"--output_dir={tmp_path}", f"--uci_flags={uci_flags}"],
      capture_output=True, text=True, check=False, cwd=REPO)
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((tmp_path / "speed.json").read_text())["results"]
  assert list(results) == ["not_prepared", "xla_cached"]
  assert results["xla_cached"]["test_mll"] == results["not_prepared"]["test_mll"]
  assert {row["intra_op_threads"] for row in results.values()} == {1}
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


def test_an_unknown_or_repeated_variant_is_refused(tmp_path, uci_flags):
  """Catches a mistyped variant silently dropped, or a repeated one timed on the first's finished
  output. (--variants ignored, every variant run: minutes instead of a few runs, is caught by the
  test above, whose results are exactly the three variants it names, in their order.)"""
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
