"""report.trace_comparison: windowed means at given steps, partial traces, bad files."""
import numpy as np
import pytest

from report import trace_comparison


def _write(path, elbo, kl):
  np.savez(path, trace=np.asarray(elbo, np.float32), kl_trace=np.asarray(kl, np.float32))
  return str(path)


def test_rows_average_the_window_ending_at_each_step_and_skip_unreached_steps(tmp_path):
  baseline = trace_comparison.load_trace(
      _write(tmp_path / "a.npz", np.arange(1, 101), np.full(100, 5.0)))
  variant = trace_comparison.load_trace(
      _write(tmp_path / "b.npz", 2 * np.arange(1, 51), np.full(50, 3.0)))
  rows = trace_comparison.comparison_rows(baseline, variant, steps=(10, 50, 100), window=10)
  assert rows[0]["baseline_elbo"] == pytest.approx(5.5)          # mean of 1..10
  assert rows[1]["variant_elbo"] == pytest.approx(2 * 45.5)      # mean of 2 * (41..50)
  assert rows[1]["elbo_difference"] == pytest.approx(91.0 - 45.5)
  assert rows[1]["variant_kl"] == pytest.approx(3.0)
  assert np.isnan(rows[2]["variant_elbo"]) and rows[2]["baseline_elbo"] == pytest.approx(95.5)
  text = trace_comparison.to_markdown(rows, "a", "b", 10)
  assert "| 100 | 96 | – | – | 5 | – |" in text


def test_a_file_without_the_traces_is_a_clear_error(tmp_path):
  np.savez(tmp_path / "x.npz", trace=np.zeros(3))
  with pytest.raises(ValueError, match="x.npz has no kl_trace"):
    trace_comparison.load_trace(str(tmp_path / "x.npz"))
