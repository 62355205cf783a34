"""The toy binary end to end: outputs, the ELBO ordering, modes, bad flags."""
import json
import os
import subprocess
import sys

import pytest

from toy import multimodal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_refinement_beats_the_gaussian_and_visits_every_mode(tmp_path):
  config = multimodal.ToyConfig(num_samples=600, vi_steps=1500, refine_steps=300, elbo_samples=6000)
  metrics = multimodal.train_and_evaluate(config, str(tmp_path))
  assert metrics["num_modes"] == 4
  assert metrics["modes_visited"] == 1.0
  assert metrics["elbo_aux"] > metrics["elbo"] + 3 * metrics["elbo_aux_stderr"]
  assert metrics["elbo_aux"] < metrics["log_evidence"]
  assert abs(metrics["gaussian_loc"]
            ) < 0.1 and metrics["gaussian_scale"] > 0.4  # broad Gaussian, Figure 2b
  assert (tmp_path / "figure.png").stat().st_size > 10_000


def _run_binary(*args):
  # Without TF_CPP_MIN_LOG_LEVEL, as a user's shell runs it: TensorFlow's start-up noise would show.
  environment = {name: value for name, value in os.environ.items()
                 if name != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable, "-m", "toy.multimodal", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300, env=environment)


def test_binary_writes_results_json(tmp_path):
  out = tmp_path / "run"
  completed = _run_binary(f"--output_dir={out}", "--num_samples=50", "--vi_steps=200",
                          "--refine_steps=50", "--elbo_samples=500")
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((out / "results.json").read_text())
  assert results["benchmark"] == "toy" and results["method"] == "refined_vi"
  for key in ("elbo", "elbo_aux", "modes_visited"):
    assert isinstance(results["metrics"][key], float)
  assert results["flags"]["num_samples"] == 50
  assert results["versions"]["tensorflow"].startswith("2.")
  assert {"train_seconds", "refine_seconds", "total_seconds"} <= set(results["timings"])
  assert (out / "figure.png").exists()
  assert not [name for name in os.listdir(out) if name.startswith(".tmp-")]
  assert "cuda" not in completed.stderr.lower()   # no TensorFlow start-up noise


@pytest.mark.parametrize(
    "flag,message",
    [("--num_samples=0", "num_samples=0 is out of range; allowed: >= 1"),
     ("--first_variance=1.5", "first_variance=1.5 is out of range; allowed: > 0 and < 1"),
     ("--num_samples=ten", "num_samples")])
def test_bad_flags_give_one_line_and_no_results(tmp_path, flag, message):
  """The flags are checked before TensorFlow loads: the error is stderr's only line."""
  completed = _run_binary(f"--output_dir={tmp_path}", flag)
  assert completed.returncode == 2
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
  assert not (tmp_path / "results.json").exists()
