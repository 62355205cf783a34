"""tests.usage_runs: many runs of a binary from one process, each as a fresh `python -m` run."""
import os
import subprocess
import sys

from tests.usage_runs import UsageRuns, run_commands

# A binary that defines an absl flag as it is imported, counts its runs in the process, reads an
# environment variable, changes it, and writes into --output_dir when asked.
BINARY = '''
import os, sys
from absl import app, flags
flags.DEFINE_integer("status", 0, "exit status")
flags.DEFINE_string("output_dir", None, "where to write")
flags.DEFINE_float("sleep", 0, "seconds to sleep first")

def main(argv):
  import time
  sys.usage_runs = getattr(sys, "usage_runs", 0) + 1   # outlives the module: the process's runs
  time.sleep(flags.FLAGS.sleep)
  print(f"runs {sys.usage_runs} variable {os.environ.get('USAGE_RUNS_VARIABLE')}")
  print("to stderr", file=sys.stderr)
  if flags.FLAGS.output_dir:
    os.makedirs(flags.FLAGS.output_dir)
  os.environ["USAGE_RUNS_VARIABLE"] = "leaked"
  sys.exit(flags.FLAGS.status)

if __name__ == "__main__":
  app.run(main)
'''


def test_each_run_is_what_a_fresh_process_gives(tmp_path):
  """Catches a driver whose runs leak into the next (module state, flags, environment), lose
  stdout, stderr or the exit status, or never end: each run is compared with `python -m`."""
  (tmp_path / "usage_runs_binary.py").write_text(BINARY)
  environment = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                 "USAGE_RUNS_VARIABLE": "base"}
  commands = [["--status=0"], ["--status=2"], [], ["--status=3", "--nosuch_flag"],
              ["--status=0"]]
  changes = [{}, {"USAGE_RUNS_VARIABLE": "own"}, {}, {}, {"USAGE_RUNS_VARIABLE": None}]
  runs = run_commands("usage_runs_binary", commands, environment, changes)
  for argv, own, run in zip(commands, changes, runs):
    fresh_environment = {**os.environ, **environment, **own}
    fresh_environment = {name: value for name, value in fresh_environment.items()
                         if value is not None}
    fresh = subprocess.run([sys.executable, "-m", "usage_runs_binary", *argv], text=True,
                           capture_output=True, env=fresh_environment)
    assert (run.returncode, run.stdout, run.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr), argv
  assert [run.returncode for run in runs] == [0, 2, 0, 1, 0]
  assert runs[0].stdout == "runs 1 variable base\n" and runs[1].stdout == "runs 1 variable own\n"
  assert runs[2].stdout == "runs 1 variable base\n" and runs[4].stdout == "runs 1 variable None\n"
  slow, = run_commands("usage_runs_binary", [["--sleep=30"]], environment, timeout=1)
  assert slow.returncode is None


def test_usage_runs_give_each_run_an_output_folder_of_its_own(tmp_path):
  """A run's OUTPUT_DIR is its own folder, made by the binary only (none before the runs)."""
  (tmp_path / "usage_runs_binary.py").write_text(BINARY)
  runs = UsageRuns("usage_runs_binary", tmp_path / "runs",
                   [[f"--output_dir={UsageRuns.OUTPUT_DIR}"], ["--status=2"]],
                   environment={"PYTHONPATH": str(tmp_path)})
  assert not runs.output_dir(f"--output_dir={UsageRuns.OUTPUT_DIR}").exists()
  assert runs.run("--status=2").returncode == 2
  assert runs.output_dir(f"--output_dir={UsageRuns.OUTPUT_DIR}").is_dir()
  assert not runs.output_dir("--status=2").exists()
