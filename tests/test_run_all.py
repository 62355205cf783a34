"""./run_all.sh (issue 53): its dry runs, against the committed results.

The committed results must be what today's paper command makes: its dry run finds every UCI and
LeNet-5 run already made with the command's settings. Both scales must have a step that makes
each of the paper's tables and figures. (A smoke run itself takes minutes: not a test.)
"""
import concurrent.futures
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVIRONMENT = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
PAPER_ARTEFACTS = {"Table 1", "Table 2", "Table 3", "Figure 2", "Figure 3", "Figure 4", "Figure 5"}
# A table's total line of `run_table.sh --print_commands`.
TABLE_TOTAL = re.compile(r"^# (\w+) table \((.+?)\): (\d+) runs?, (\d+) made with these settings, "
                         r"(\d+) to run in (\d+) jobs?;", re.MULTILINE)


def _run_all(*arguments):
  return subprocess.run(["bash", "run_all.sh", *arguments], cwd=REPO, env=ENVIRONMENT,
                        capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def dry_runs():
  """The dry runs of both scales (at once: each is mostly waiting on Python start-ups)."""
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    paper = pool.submit(_run_all, "--scale=paper", "--dry_run")
    smoke = pool.submit(_run_all, "--scale=smoke", "--with_related", "--dry_run",
                        "--output_root=/nonexistent/refined_vi_smoke")
    return {"paper": paper.result(), "smoke": smoke.result()}


def test_the_paper_command_finds_every_committed_uci_and_lenet_run_made(dry_runs):
  """Catches: committed runs made with settings today's command does not give (a changed
  default, a flag the command lost), which `./run_all.sh --scale=paper` would refuse or redo."""
  result = dry_runs["paper"]
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  totals = {}
  for benchmark, root, runs, made, to_run, jobs in TABLE_TOTAL.findall(result.stdout
                                                                      + result.stderr):
    if root == "results" and benchmark in ("uci", "image"):
      count = totals.setdefault(benchmark, [0, 0, 0])
      for index, value in enumerate((runs, made, to_run)):
        count[index] += int(value)
  # Table 1: 9 datasets x 5 methods x 5 seeds; Table 2: 2 datasets x 5 methods x 3 seeds.
  assert totals == {"uci": [225, 225, 0], "image": [30, 30, 0]}, totals
  assert "made with these settings: results/toy/multimodal/results.json" in result.stdout
  assert "made with these settings: results/bandits/mushroom/vi_ts/results.json" in result.stdout
  assert "nothing run" in result.stdout


def test_every_paper_table_and_figure_has_a_step_at_both_scales(dry_runs):
  for scale, result in dry_runs.items():
    steps = re.findall(r"^== \[\d+\] ([^:]+):", result.stdout, re.MULTILINE)
    made = {match for step in steps for match in re.findall(r"\b(?:Table|Figure) \d\b", step)}
    assert made >= PAPER_ARTEFACTS, (scale, PAPER_ARTEFACTS - made)
    assert steps[-1].startswith("The report"), scale
  paper = dry_runs["paper"].stdout
  assert "Table 3: no CIFAR-10 files" in paper or "Table 3: CIFAR-10 found" in paper
  smoke = dry_runs["smoke"].stdout
  assert smoke.startswith("run_all.sh --scale=smoke: output under /nonexistent/refined_vi_smoke")
  assert "--smoke" in smoke.splitlines()[-2]
  assert "--methods=vogn\\ refined_vogn\\ svgd\\ fsvgd" in smoke
  assert "--agents=svgd_ts\\,fsvgd_ts" in smoke


@pytest.mark.parametrize("arguments, message", [
    (["--scale=huge"], "unknown scale 'huge'"),
    (["--jobs=2"], "unknown argument '--jobs=2'"),
    (["--data_dir=/nonexistent/data"], "--data_dir=/nonexistent/data is not a folder"),
    (["--scale=paper", "--with_related"], "--with_related is for --scale=smoke"),
])
def test_bad_arguments_are_one_line_and_exit_2(arguments, message):
  result = _run_all(*arguments, "--dry_run")
  assert result.returncode == 2 and result.stdout == ""
  assert result.stderr.startswith(f"error: {message}") and len(result.stderr.splitlines()) == 1


def test_help_says_where_output_goes():
  result = _run_all("--help")
  assert result.returncode == 0
  assert "/tmp/refined_vi_smoke" in result.stdout and "REFINED_VI_DATA_DIR" in result.stdout
