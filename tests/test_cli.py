"""How a binary made with runner.cli ends."""
import os
import subprocess
import sys
import textwrap

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
  script = tmp_path / "binary.py"
  script.write_text(textwrap.dedent(body))
  # Buffered as for a user (this machine's shells set PYTHONUNBUFFERED).
  environment = {name: value for name, value in os.environ.items()
                 if name != "PYTHONUNBUFFERED"}
  environment["PYTHONPATH"] = REPOSITORY
  return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        env=environment, check=False, timeout=120)


def test_a_finished_binary_leaves_at_once_with_its_output_flushed(tmp_path):
  """A finished run exits 0 through os._exit, skipping the interpreter's teardown (~0.7 s of
  TensorFlow's at every run's end). Catches output lost by the fast exit (stdout into a pipe is
  block-buffered: without the flush the printed metrics vanish) and the teardown still running
  (the atexit handler, standing in for it, would print)."""
  completed = _run_script(tmp_path, """
      import atexit
      from absl import logging
      from runner import cli
      atexit.register(lambda: print("teardown ran"))
      def main(argv):
        print("test_mll: -2.5")
        logging.info("a progress line")
      cli.run(main)
  """)
  assert completed.returncode == 0, completed.stderr
  assert completed.stdout == "test_mll: -2.5\n"
  assert "a progress line" in completed.stderr


@pytest.mark.parametrize("error", [
    'RuntimeError("the mushroom file has 21 columns, 23 expected")',
    'FloatingPointError("vi_ts: non-finite ELBO at bandit step 1; the model diverged")'])
def test_a_failed_binary_still_exits_with_its_one_line_and_status(tmp_path, error):
  """The fast exit is for finished runs only: a runtime failure keeps status 1 and its line
  (a diverged run's FloatingPointError too: a diverged run is a failure, never a result)."""
  completed = _run_script(tmp_path, f"""
      from runner import cli
      def main(argv):
        print("partial")
        raise {error}
      cli.run(main)
  """)
  assert completed.returncode == 1
  message = error.split('"')[1]
  assert completed.stderr.strip().splitlines()[-1] == f"error: {message}"
  assert completed.stdout == "partial\n"


def test_a_profiled_binary_ends_as_usual_so_the_profile_is_written(tmp_path):
  """`python -m cProfile -o ... binary` writes its profile at the interpreter's exit: catches the
  fast exit skipping it (no profile file)."""
  script = tmp_path / "binary.py"
  script.write_text("from runner import cli\ncli.run(lambda argv: None)\n")
  profile = tmp_path / "run.prof"
  completed = subprocess.run(
      [sys.executable, "-m", "cProfile", "-o", str(profile), str(script)], capture_output=True,
      text=True, env={**os.environ, "PYTHONPATH": REPOSITORY}, check=False, timeout=120)
  assert completed.returncode == 0, completed.stderr
  assert profile.stat().st_size > 0
