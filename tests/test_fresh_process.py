"""benchmarks.fresh_process: a measurement's JSON comes back from its own process."""
import os

import pytest

from benchmarks import fresh_process

_PROBE = """import json, os, sys
if "--fail" in sys.argv:
  sys.exit("error: probe told to fail")
print("noise before the result")
print(json.dumps({"threads": os.environ.get("TF_NUM_INTRAOP_THREADS"), "argv": sys.argv[1:]}))
"""


@pytest.fixture()
def probe_path(tmp_path, monkeypatch):
  (tmp_path / "probe_module.py").write_text(_PROBE)
  monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
  monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")


def test_measure_reads_last_line_and_applies_environment(probe_path):
  """Catches a child that inherits a thread setting the caller asked to remove (the step floor's
  'default threads' rows would then time one thread)."""
  assert fresh_process.measure("probe_module", ["--x=1"]) == {"threads": "7", "argv": ["--x=1"]}
  assert fresh_process.measure("probe_module", [], {"TF_NUM_INTRAOP_THREADS": None})[
      "threads"] is None
  assert fresh_process.measure("probe_module", [], {"TF_NUM_INTRAOP_THREADS": "1"})[
      "threads"] == "1"


def test_measure_failure_names_the_childs_error(probe_path):
  with pytest.raises(RuntimeError, match="probe told to fail"):
    fresh_process.measure("probe_module", ["--fail"])


def test_rounds_interleave_keys():
  calls = []
  samples = fresh_process.interleaved_rounds(["a", "b"], 2, lambda key: calls.append(key) or key)
  assert calls == ["a", "b", "a", "b"]
  assert samples == {"a": ["a", "a"], "b": ["b", "b"]}
