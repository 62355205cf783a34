"""image.trace_outliers: outlier draws found in the log-likelihood term, KL excursions, CLI."""
import os
import subprocess
import sys

import numpy as np
import pytest

from image import trace_outliers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trace(num_steps=2_000, seed=0):
  rng = np.random.default_rng(seed)
  log_likelihood = -1_000.0 * (1 + 0.1 * rng.random(num_steps))
  kl = np.full(num_steps, 500.0)
  return log_likelihood, kl


def _as_trace(log_likelihood, kl):
  return {"elbo": log_likelihood - kl, "kl": kl}


def test_an_outlier_draw_and_its_kl_excursion_are_measured():
  log_likelihood, kl = _trace()
  log_likelihood[999] = -50_000.0                 # step 1,000: 50 times the median
  kl[1_000:1_030] = np.linspace(600, 5_000, 30)   # peak 30 steps after the draw ...
  kl[1_030:1_100] = np.linspace(5_000, 700, 70)   # ... below 1.5 x 500 at +100
  kl[1_100:] = 700.0
  (draw,) = trace_outliers.outlier_draws(_as_trace(log_likelihood, kl))
  assert draw.step == 1_000
  assert draw.log_likelihood == pytest.approx(-50_000.0)
  assert draw.median_log_likelihood == pytest.approx(-1_050.0, rel=0.01)
  assert (draw.kl_before, draw.kl_peak, draw.steps_to_peak) == (500.0, 5_000.0, 30)
  assert draw.steps_to_recover == 100


def test_a_kl_excursion_without_an_outlier_draw_is_not_one():
  """Catches finding outliers in the minibatch ELBO itself: a KL rise alone lowers the ELBO
  tenfold here, but no drawn network was wrong on its batch."""
  log_likelihood, kl = _trace()
  kl[1_000:1_050] = 20_000.0
  assert trace_outliers.outlier_draws(_as_trace(log_likelihood, kl)) == []


def test_a_kl_that_never_recovers_and_the_summary_row():
  log_likelihood, kl = _trace()
  log_likelihood[[499, 1_799]] = [-20_000.0, -40_000.0]
  kl[500:1_000] = 600.0                              # peak 600 < 750: recovered at +1
  kl[1_800:] = 4_000.0                               # not by the end
  trace = _as_trace(log_likelihood, kl)
  draws = trace_outliers.outlier_draws(trace)
  assert [d.step for d in draws] == [500, 1_800]
  assert draws[0].steps_to_recover == 1 and draws[1].steps_to_recover is None
  row = trace_outliers.summary_row("run", trace, draws, final_window=100)
  assert (row["draws"], row["first_step"], row["largest_step"]) == (2, 500, 1_800)
  assert row["steps_above"] == 1 + (2_000 - 1_800 + 1)
  assert row["largest_kl_ratio"] == pytest.approx(8.0)
  text = trace_outliers.to_markdown([row], 10.0, 200, 200)
  assert "| run | 2,000 | 2 | 500 | 1,800 |" in text and "not by the end" in text


def _run(tmp_path, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "image.trace_outliers", *args], cwd=REPO,
                        env=env, capture_output=True, text=True, check=False)


def test_the_binary_writes_its_table_and_refuses_mismatched_labels(tmp_path):
  log_likelihood, kl = _trace()
  log_likelihood[999] = -50_000.0
  path = tmp_path / "trace.npz"
  np.savez(path, trace=(log_likelihood - kl).astype(np.float32), kl_trace=kl.astype(np.float32))
  output = tmp_path / "table.md"
  done = _run(tmp_path, f"--traces={path}", "--labels=seed 0", f"--output={output}")
  assert done.returncode == 0, done.stderr
  assert "| seed 0 | 2,000 | 1 | 1,000 |" in output.read_text()
  refused = tmp_path / "refused.md"
  done = _run(tmp_path, f"--traces={path}", "--labels=a,b", f"--output={refused}")
  assert done.returncode == 2 and "--labels has 2 entries for 1 --traces" in done.stderr
  assert not refused.exists()
