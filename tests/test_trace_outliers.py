"""report.trace_outliers: outlier draws found in the log-likelihood term, episodes, the CLI."""
import os
import subprocess
import sys

import numpy as np
import pytest

from report import trace_outliers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trace(num_steps=2_000, seed=0):
  rng = np.random.default_rng(seed)
  log_likelihood = -1_000.0 * (1 + 0.1 * rng.random(num_steps))
  kl = np.full(num_steps, 500.0)
  return log_likelihood, kl


def _as_trace(log_likelihood, kl):
  return {"elbo": log_likelihood - kl, "kl": kl}


def test_an_outlier_draw_and_its_kl_excursion_are_measured():
  """Catches taking the KL before the draw from the step before it: kl_trace[i] is already the
  KL of the parameters step i's draw came from."""
  log_likelihood, kl = _trace()
  kl[999:] = 520.0                                # the KL step 1,000's draw came from
  log_likelihood[999] = -50_000.0                 # step 1,000: about 48 times the median
  kl[1_000:1_030] = np.linspace(600, 5_200, 30)   # peak 30 steps after the draw ...
  kl[1_030:1_100] = np.linspace(5_200, 700, 70)   # ... last at or above 1.5 x 520 at +99
  kl[1_100:] = 700.0
  (episode,) = trace_outliers.outlier_episodes(_as_trace(log_likelihood, kl))
  median = np.median(log_likelihood[799:999])
  assert episode.step == 1_000 and episode.num_outliers == 1
  assert episode.largest_factor == pytest.approx(-50_000.0 / median)
  assert (episode.kl_before, episode.kl_peak, episode.steps_to_peak) == (520.0, 5_200.0, 30)
  last_above = 1_030 + np.flatnonzero(kl[1_030:1_100] >= 780)[-1]
  assert episode.steps_above == np.sum(kl[1_000:] >= 780) == last_above - 999 - 2
  assert episode.steps_to_recover == last_above - 999 + 1


def test_a_kl_excursion_without_an_outlier_draw_is_not_one():
  """Catches finding outliers in the minibatch ELBO itself: a KL rise alone lowers the ELBO
  tenfold here, but no drawn network was wrong on its batch."""
  log_likelihood, kl = _trace()
  kl[1_000:1_050] = 20_000.0
  assert trace_outliers.outlier_episodes(_as_trace(log_likelihood, kl)) == []


def test_outliers_inside_an_episode_belong_to_it_and_it_lasts_until_the_kl_is_back():
  """Catches a fixed search window: the second, larger draw at step 1,150 is part of the first
  episode, whose KL stays up for 400 steps, longer than the 200-step horizon."""
  log_likelihood, kl = _trace()
  log_likelihood[[999, 1_149]] = [-20_000.0, -90_000.0]
  kl[1_000:1_400] = 2_000.0
  kl[1_250] = 3_000.0
  (episode,) = trace_outliers.outlier_episodes(_as_trace(log_likelihood, kl))
  assert episode.num_outliers == 2
  assert episode.largest_factor == pytest.approx(
      -90_000.0 / np.median(log_likelihood[799:999]))
  assert (episode.kl_peak, episode.steps_to_peak) == (3_000.0, 251)
  assert (episode.steps_above, episode.steps_to_recover) == (400, 401)


def test_the_summary_picks_the_largest_kl_excursion_not_the_largest_draw():
  log_likelihood, kl = _trace()
  log_likelihood[[499, 1_799]] = [-90_000.0, -20_000.0]
  kl[500] = 600.0                                    # below 750: no excursion
  kl[1_800:] = 4_000.0                               # not back by the end
  trace = _as_trace(log_likelihood, kl)
  episodes = trace_outliers.outlier_episodes(trace)
  assert [e.step for e in episodes] == [500, 1_800]
  assert (episodes[0].steps_above, episodes[0].steps_to_recover) == (0, 0)
  assert episodes[1].steps_to_recover is None and episodes[1].steps_above == 200
  row = trace_outliers.summary_row("run", trace, episodes, final_window=500)
  assert (row["episodes"], row["outliers"], row["first_step"]) == (2, 2, 500)
  assert row["largest"].step == 1_800 and row["largest"].kl_peak / 500.0 == pytest.approx(8.0)
  assert row["largest_factor"] == pytest.approx(episodes[0].largest_factor)
  assert (row["final_kl"], row["median_final_kl"]) == (4_000.0, 500.0)
  text = trace_outliers.to_markdown([row], 10.0, 200, 200, final_window=500)
  assert "| run | 2,000 | 2 | 2 | 500 |" in text
  assert "| 1,800 | 8.0 | 200 | not by the end | 200 | 4,000 | 500 |" in text
  assert "median KL, last 500 |" in text


def test_a_positive_log_likelihood_term_uses_the_median_magnitude():
  """A Gaussian likelihood's term can be positive: an outlier is then factor - 1 times the
  median's magnitude below it, not factor times the median (which every step would be under)."""
  log_likelihood, kl = _trace()
  log_likelihood = -log_likelihood                   # about +1,050
  log_likelihood[999] = -9_000.0                     # 9.6 magnitudes below: an outlier at 8
  assert [e.step for e in trace_outliers.outlier_episodes(
      _as_trace(log_likelihood, kl), factor=8.0)] == [1_000]
  assert trace_outliers.outlier_episodes(_as_trace(log_likelihood, kl), factor=12.0) == []


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "report.trace_outliers", *args], cwd=REPO,
                        env=env, capture_output=True, text=True, check=False)


def test_the_binary_writes_its_table_and_refuses_bad_input(tmp_path):
  log_likelihood, kl = _trace()
  log_likelihood[999] = -50_000.0
  path = tmp_path / "trace.npz"
  np.savez(path, trace=(log_likelihood - kl).astype(np.float32), kl_trace=kl.astype(np.float32))
  output = tmp_path / "table.md"
  done = _run(f"--traces={path}", "--labels=seed 0", f"--output={output}")
  assert done.returncode == 0, done.stderr
  assert "| seed 0 | 2,000 | 1 | 1 | 1,000 |" in output.read_text()
  refused = tmp_path / "refused.md"
  for flag, message in (("--labels=a,b", "--labels has 2 entries for 1 --traces"),
                        ("--history=2000", "has 2000 steps; --history=2000 needs more"),
                        ("--factor=1", "--factor=1.0 must be > 1")):
    done = _run(f"--traces={path}", flag, f"--output={refused}")
    assert done.returncode == 2 and message in done.stderr, (flag, done.stderr)
    assert not refused.exists()
