"""One results.json per run, written atomically.

{"benchmark", "dataset", "method", "seed", "flags", "metrics", "timings",
 "versions", "git_commit", "git_commit_at_start", "machine", "command"}:
`git_commit` is HEAD when the run finished, `git_commit_at_start` HEAD when this
process imported the code it ran (they differ when commits land during a long
run; a resumed run's earlier chunks are not recorded). A file exists only for a run that
succeeded: it is written to a temporary file in the same directory and
renamed, and non-finite metrics are refused.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from typing import Any, Iterator, Mapping, Optional

RESULTS_FILENAME = "results.json"
# Beside an image run's results.json: each test example's log predictive probability of its label
# (float32, in the test set's order), whose mean is test_mll; written by
# runner.image_classification, paired image by image by report.resnet_claims.
TEST_LOG_PREDICTIVE_FILENAME = "test_log_predictive.npy"
_PACKAGES = ("tensorflow", "tf-keras", "tensorflow-probability", "edward2", "numpy", "scipy",
             "pandas", "matplotlib", "absl-py")


def library_versions() -> dict[str, str]:
  versions = {"python": platform.python_version()}
  for package in _PACKAGES:
    try:
      versions[package] = metadata.version(package)
    except metadata.PackageNotFoundError:
      versions[package] = "not installed"
  return versions


# The repository holding this code: where a run's commit and history are read.
CODE_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit(repository: Optional[str] = None) -> Optional[str]:
  """HEAD of the repository holding this code, '-dirty' if tracked files outside results/ changed.

  Committed runs live under results/, so a rerun overwrites tracked files there before its
  results.json is written; those are outputs, not code.
  """
  repository = repository or CODE_REPOSITORY
  try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
        cwd=repository, capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None
  return commit + ("-dirty" if dirty else "")


def git_history_positions(repository: Optional[str] = None) -> dict[str, int]:
  """Every commit reachable from the repository's refs, by full hash, mapped to its place in
  history with parents before children (`git rev-list --topo-order --reverse --all`): the order
  code was written in, where commit times tie (a rebase, or several commits in one second) or
  skew. Empty where git or the repository is missing; a shallow clone holds only its commits."""
  repository = repository or CODE_REPOSITORY
  try:
    listing = subprocess.run(["git", "rev-list", "--topo-order", "--reverse", "--all"],
                             cwd=repository, capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return {}
  return {commit: position for position, commit in enumerate(listing.split())}


def backfill_note(script: str) -> str:
  """'<commit> by <script>': the note a value added to a committed record after its run carries,
  so nobody mistakes it for a recorded one; exits naming the commit if the code is uncommitted."""
  commit = git_commit()
  if commit is None or commit.endswith("-dirty"):
    sys.exit(f"code at {commit}: commit the code first, so the note names what added the value")
  return f"{commit} by {script}"


_commit_at_start: dict[str, Optional[str]] = {}


def note_start_commit() -> Optional[str]:
  """Records (once per process) the commit the run starts from; `cli.main` calls it before any work.

  A run can span commits (a long run while the repository moves on), so
  results.json records this beside HEAD at the end.
  """
  if "commit" not in _commit_at_start:
    _commit_at_start["commit"] = git_commit()
  return _commit_at_start["commit"]


# The vector instructions by which oneDNN and Eigen pick their CPU kernels (x86, then ARM): two
# machines that differ in these can round differently, and SVGD's runs grow such round-off into a
# different result.
KERNEL_CPU_FEATURES = ("avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512dq",
                       "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                       "amx_int8", "amx_bf16", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm")
# Environment variables that change which oneDNN kernels run, or whether any do.
ONEDNN_ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE")


def cpu_description(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
  """The CPU as `cpuinfo_path` (Linux's /proc/cpuinfo) names it: its model (x86's model name, ARM's
  implementer and part numbers, POWER's cpu line; None where missing) and its
  KERNEL_CPU_FEATURES; and the ONEDNN_ENVIRONMENT variables that are set: what decides a CPU
  run's round-off beyond the code and the package versions."""
  fields: dict[str, str] = {}
  features: set[str] = set()
  try:
    with open(cpuinfo_path) as cpuinfo:
      for line in cpuinfo:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("flags", "Features"):
          features.update(value.split())
        else:
          fields.setdefault(key, value)
  except OSError:
    pass
  model = fields.get("model name") or fields.get("cpu")
  if model is None and "CPU implementer" in fields:
    model = f"implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
  return {"cpu_model": model,
          "cpu_features": [name for name in KERNEL_CPU_FEATURES if name in features],
          "onednn_environment": {name: os.environ[name] for name in ONEDNN_ENVIRONMENT
                                 if name in os.environ}}


def onednn_enabled() -> Optional[bool]:
  """Whether TensorFlow runs its oneDNN kernels (by default on x86 Linux, unless
  TF_ENABLE_ONEDNN_OPTS=0); None where this TensorFlow does not say."""
  try:
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())
  except (ImportError, AttributeError):
    return None


def machine_description() -> dict[str, Any]:
  """The platform and CPU (`cpu_description`), and with TensorFlow loaded whether it runs oneDNN
  and the strategy, replicas and devices of the run."""
  description = {
      "platform": platform.platform(),
      "processor": platform.machine(),
      "cpu_count": os.cpu_count(),
      **cpu_description(),
  }
  if "tensorflow" in sys.modules:
    import tensorflow as tf

    from common.distribution import describe_strategy
    description["onednn_enabled"] = onednn_enabled()
    description.update(describe_strategy(tf.distribute.get_strategy()))
  return description


def check_finite(section: str, values: Mapping[str, Any]) -> None:
  """Raises FloatingPointError naming the first non-finite value.

  FloatingPointError is a runtime failure: exit status 1.
  """
  def walk(key, value):
    if isinstance(value, Mapping):
      for inner_key, inner in value.items():
        walk(f"{key}.{inner_key}", inner)
    elif isinstance(value, float) and not math.isfinite(value):
      raise FloatingPointError(
          f"{section}.{key} is {value}: refusing to write a results file with a "
          "non-finite value")
  for key, value in values.items():
    walk(key, value)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
  """Yields a temporary path beside `path` and renames it to `path` on success.

  `path` is never half-written.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-",
                                       suffix=os.path.splitext(path)[1])
  os.close(handle)
  os.chmod(temporary,
           0o666 & ~_umask())  # mkstemp's 0600 would hide results from the rest of a group
  try:
    yield temporary
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise


def write_json_atomically(path: str, payload: Mapping[str, Any]) -> None:
  with atomic_output(path) as temporary, open(temporary, "w") as stream:
    json.dump(payload, stream, indent=2)
    stream.write("\n")


def write_results(output_dir: str, *, benchmark: str, method: str, metrics: Mapping[str, Any],
                  timings: Mapping[str, float], flags: Mapping[str,
                                                               Any], dataset: Optional[str] = None,
                  seed: Optional[int] = None, command: Optional[str] = None) -> str:
  """Writes output_dir/results.json and returns its path."""
  check_finite("metrics", metrics)
  check_finite("timings", timings)
  payload = {
      "benchmark": benchmark, "dataset": dataset, "method": method, "seed": seed,
      "flags": dict(flags), "metrics": dict(metrics), "timings": dict(timings),
      "versions": library_versions(), "git_commit": git_commit(),
      "git_commit_at_start": note_start_commit(), "machine": machine_description(),
      "command": command or " ".join([os.path.basename(sys.executable)] + sys.argv),
  }
  path = os.path.join(output_dir, RESULTS_FILENAME)
  write_json_atomically(path, payload)
  return path


def write_text_atomically(path: str, text: str) -> None:
  with atomic_output(path) as temporary, open(temporary, "w") as stream:
    stream.write(text)


def save_figure(figure, path: str) -> None:
  """Saves a matplotlib figure as PNG, atomically."""
  with atomic_output(path) as temporary:
    figure.savefig(temporary, format="png", dpi=120, bbox_inches="tight")


def write_csv_atomically(path: str, columns: Mapping[str, Any]) -> None:
  """Writes equal-length columns (name -> 1-D sequence) as a CSV file with a header, atomically."""
  import pandas as pd  # on demand: binaries that write no CSV do not pay for the import
  frame = pd.DataFrame({name: list(values) for name, values in columns.items()})
  with atomic_output(path) as temporary:
    frame.to_csv(temporary, index=False)
