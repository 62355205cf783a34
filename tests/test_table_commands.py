"""A table's runs as printed commands (`common/run_table.sh --print_commands`, issue 54), and the
"already made with these settings" check they rest on (`runner.made`)."""
import json
import os
import subprocess
import sys

import pytest

from runner import table_commands
from runner.made import RunSettings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("REFINED_VI_DATA_DIR", os.path.join(REPO, "..", "shared", "data"))
ENVIRONMENT = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# Three methods that are two jobs (vi then refined_vi from its model; mnf), so `xargs -P 2` runs
# them at once.
TINY_TABLE = ["--benchmark=uci", "--datasets=yacht_hydrodynamics", "--seeds=0",
              "--methods=vi refined_vi mnf", "--jobs=2"]
# Uncompiled (the same draws, no XLA compile per process): the test is about which commands run.
TINY_FLAGS = ["--hidden_units=8", "--vi_steps=100", "--num_samples=2", "--steps_per_auxiliary=5",
              "--elbo_num_samples=1", "--mnf_steps=50", "--nojit_compile", f"--data_dir={DATA}/uci",
              "--nodownload"]
RUN_FLAGS = ["--dataset=yacht_hydrodynamics", "--method=vi", "--seed=0"]


def _run_table(*arguments, env=None, **kwargs):
  return subprocess.run(["bash", "common/run_table.sh", *arguments], cwd=REPO,
                        env=env or ENVIRONMENT, capture_output=True, text=True, timeout=900,
                        **kwargs)


def _record(output_dir, arguments):
  """A results.json as the binary writes it for `arguments` (its flags; no training)."""
  config, _ = RunSettings("uci.main").parse([*arguments, f"--output_dir={output_dir}"])
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "results.json"), "w") as stream:
    json.dump({"flags": config.as_dict(), "metrics": {}}, stream)


def test_a_run_is_made_only_if_its_results_json_recorded_these_settings(tmp_path):
  """Catches: deciding "already made" by the file's existence, or by a comparison other than the
  binary's (a flag not stored, or a setting that shapes nothing counted)."""
  settings = RunSettings("uci.main")
  folder = tmp_path / "run"
  arguments = [*RUN_FLAGS, f"--output_dir={folder}"]
  assert not settings.state(arguments).made and "does not exist" in settings.state(arguments).line
  _record(folder, RUN_FLAGS)
  assert settings.state(arguments).made
  # Settings that shape nothing (where files go, threads, checkpoint interval) do not count.
  assert settings.state([*arguments, "--intra_op_threads=1", "--steps_per_checkpoint=7",
                         f"--vi_checkpoint_dir={tmp_path}/elsewhere"]).made
  other = settings.state([*arguments, "--learning_rate=0.002"])
  assert not other.made and other.differing == ("learning_rate",)
  assert "--learning_rate=0.002 (recorded: 0.001)" in other.line
  # A record that lacks a setting counts as the value runs had before it existed.
  record = json.loads((folder / "results.json").read_text())
  del record["flags"]["noise_chunk_steps"]
  (folder / "results.json").write_text(json.dumps(record))
  assert not settings.state(arguments).made
  assert settings.state([*arguments, "--nojit_compile", "--noise_chunk_steps=0"]).made


def test_made_is_a_command_line_check_exiting_0_3_or_2(tmp_path):
  def made(*arguments):
    return subprocess.run([sys.executable, "-m", "runner.made", *arguments], cwd=REPO,
                          env=ENVIRONMENT, capture_output=True, text=True, timeout=120)
  folder = tmp_path / "run"
  _record(folder, RUN_FLAGS)
  done = made("uci.main", *RUN_FLAGS, f"--output_dir={folder}")
  assert done.returncode == 0 and done.stdout.startswith("made with these settings"), done.stderr
  other = made("uci.main", *RUN_FLAGS, "--seed=1", f"--output_dir={folder}")
  assert other.returncode == 3 and "--seed=1 (recorded: 0)" in other.stdout
  refused = made("uci.main", *RUN_FLAGS, "--vi_step=3", f"--output_dir={folder}")
  assert refused.returncode == 2 and refused.stderr.startswith("error: ")
  assert made("no_such.binary").returncode == 2 and made().returncode == 2


def test_a_job_runs_the_methods_that_share_a_model_in_order_in_one_command(tmp_path):
  table = table_commands.Table("uci", ("yacht_hydrodynamics", "wine"),
                               ("vi", "mnf", "refined_vi"), ("0",), str(tmp_path), str(tmp_path),
                               "", 1, ("--vi_steps=3",))
  commands, lines = table_commands.table_commands(table)
  assert len(commands) == 4   # (vi, refined_vi) and mnf, per dataset
  first = commands[0]
  assert first.startswith(f"cd {REPO} && ") and "TF_NUM_INTRAOP_THREADS" not in first
  assert first.index("--method=vi ") < first.index("--method=refined_vi ")
  assert first.count("python -m uci.main") == 2 and "--dataset=yacht_hydrodynamics" in first
  assert f">{tmp_path}/uci/yacht_hydrodynamics/refined_vi/seed_0/log.txt 2>&1" in first
  assert (f"--vi_checkpoint_dir={tmp_path}/uci/yacht_hydrodynamics/vi_checkpoints/seed_0"
          in first)
  assert lines[-1].startswith(f"# uci table ({tmp_path}): 6 runs, 0 made with these settings, 6 "
                              "to run in 4 jobs; settings beyond dataset, method, seed and "
                              "folders: --vi_steps=3")
  # A made run leaves its job; a job with nothing left is not printed.
  _record(tmp_path / "uci" / "wine" / "mnf" / "seed_0",
          ["--dataset=wine", "--method=mnf", "--seed=0", "--vi_steps=3"])
  _record(tmp_path / "uci" / "wine" / "vi" / "seed_0",
          ["--dataset=wine", "--method=vi", "--seed=0", "--vi_steps=3"])
  commands, lines = table_commands.table_commands(table)
  assert len(commands) == 3 and "# uci wine: 3 runs, 2 made with these settings, 1 to run" in lines
  wine = [command for command in commands if "--dataset=wine" in command]
  assert len(wine) == 1 and "--method=vi " not in wine[0] and "--method=refined_vi " in wine[0]


def test_print_commands_refuses_what_run_table_refuses():
  unknown = _run_table("--benchmark=uci", "--datasets=wine", "--methods=vi laplace",
                       "--print_commands")
  assert unknown.returncode == 2 and "unknown method 'laplace'" in unknown.stderr
  bad_flag = _run_table("--benchmark=uci", "--datasets=wine", "--methods=vi", "--print_commands",
                        "--", "--vi_step=3")
  assert bad_flag.returncode == 2 and bad_flag.stderr.startswith("error: ")
  helped = _run_table("--help")
  assert helped.returncode == 0 and "--print_commands" in helped.stdout
  assert "run in order" in helped.stdout and "need no ordering" in helped.stdout


# `python` on the PATH of the table's runs. For `python -m uci.main ...` it records what the
# binary would be given (its arguments, the folder it runs in, the environment variables a run
# reads, and its job: the shell that started it) and writes the results.json the binary records
# for those flags, with no training; for the method named in $STAND_IN_REAL it then runs the real
# binary. Anything else (the registry, runner.table_commands) runs the real python.
STAND_IN = """#!{python}
import json, os, sys
REAL = {python!r}
if sys.argv[1:3] != ["-m", "uci.main"]:
  os.execv(REAL, [REAL, *sys.argv[1:]])
arguments = sys.argv[3:]
read = {{name: value for name, value in os.environ.items()
        if name.startswith(("TF_", "REFINED_VI_", "PYTHON", "CUDA_", "XLA_"))}}
with open(os.environ["STAND_IN_RECORD"], "a") as stream:
  stream.write(json.dumps(dict(arguments=arguments, cwd=os.getcwd(), job=os.getppid(),
                               environment=read)) + "\\n")
if "--method=" + os.environ.get("STAND_IN_REAL", "-") in arguments:
  os.execv(REAL, [REAL, *sys.argv[1:]])
sys.path.insert(0, {repo!r})
from runner.made import RunSettings
config, output_dir = RunSettings("uci.main").parse(arguments)
with open(os.path.join(output_dir, "results.json"), "w") as stream:
  json.dump({{"flags": config.as_dict(), "metrics": {{}}}}, stream)
print("test_mll: -1.0 (stand-in)")
"""


def _stand_in_environment(folder, record, real_method="-"):
  """ENVIRONMENT with STAND_IN's `python` first on PATH, recording into `record`."""
  folder.mkdir(exist_ok=True)
  stand_in = folder / "python"
  stand_in.write_text(STAND_IN.format(python=sys.executable, repo=REPO))
  stand_in.chmod(0o755)
  return {**ENVIRONMENT, "PATH": f"{folder}{os.pathsep}{ENVIRONMENT['PATH']}",
          "STAND_IN_RECORD": str(record), "STAND_IN_REAL": real_method}


def _jobs_recorded(record, root):
  """The binary runs `record` holds, as jobs (the runs one shell started, in the order it started
  them), `root` written <root>; sorted, since jobs may run at once."""
  jobs = {}
  for line in record.read_text().splitlines():
    run = json.loads(line)
    arguments = [argument.replace(str(root), "<root>") for argument in run["arguments"]]
    jobs.setdefault(run["job"], []).append(
        json.dumps([arguments, run["cwd"], sorted(run["environment"].items())]))
  return sorted(jobs.values())


@pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "uci")),
                    reason="the offline UCI copy is not here")
def test_printed_commands_through_xargs_make_the_table_jobs_2_makes(tmp_path):
  """The printed commands, run by `xargs -P 2`, start the binary exactly as run_table.sh's local
  pool does: the same runs with the same arguments (flags, folders), from the same folder, with
  the same environment (the one-thread pin, the data folder), grouped into the same jobs in the
  same order. Both run a stand-in binary that records this (and writes the results.json the binary
  would record); the printed vi run (the cheapest) runs the real binary, and the results.json it
  writes counts as made. Catches: a printed command that differs
  from what run_table.sh runs (a flag, a folder, the thread pin; planted: each), or jobs that need
  an order between them (planted: vi and refined_vi printed as two jobs)."""
  pool, printed = tmp_path / "pool", tmp_path / "printed"
  pool_record, printed_record = tmp_path / "pool_runs.jsonl", tmp_path / "printed_runs.jsonl"
  local = _run_table(*TINY_TABLE, f"--output_root={pool}", "--", *TINY_FLAGS,
                     env=_stand_in_environment(tmp_path / "bin", pool_record))
  assert local.returncode == 0, local.stdout + local.stderr
  assert "[3/3] done yacht_hydrodynamics" in local.stdout, local.stdout
  listing = _run_table(*TINY_TABLE, f"--output_root={printed}", "--print_commands", "--",
                       *TINY_FLAGS)
  assert listing.returncode == 0, listing.stderr
  commands = listing.stdout.splitlines()
  assert len(commands) == 2 and all("TF_NUM_INTRAOP_THREADS=1" in c for c in commands)
  assert "3 runs, 0 made with these settings, 3 to run in 2 jobs" in listing.stderr
  ran = subprocess.run(["xargs", "-P", "2", "-d", "\n", "-n", "1", "bash", "-c"],
                       input=listing.stdout, cwd=tmp_path, capture_output=True, text=True,
                       timeout=900, env=_stand_in_environment(tmp_path / "bin", printed_record,
                                                              real_method="vi"))
  assert ran.returncode == 0, ran.stdout + ran.stderr
  pool_jobs = _jobs_recorded(pool_record, pool)
  assert [[json.loads(run)[0][1] for run in job] for job in pool_jobs] == [
      ["--method=mnf"], ["--method=vi", "--method=refined_vi"]]
  assert _jobs_recorded(printed_record, printed) == pool_jobs
  for method in ("vi", "refined_vi", "mnf"):
    assert (printed / "uci" / "yacht_hydrodynamics" / method / "seed_0" / "log.txt").exists()
  real = json.loads((printed / "uci" / "yacht_hydrodynamics" / "vi" / "seed_0" /
                     "results.json").read_text())
  assert real["method"] == "vi" and -10 < real["metrics"]["test_mll"] < 0
  again = _run_table(*TINY_TABLE, f"--output_root={printed}", "--print_commands", "--",
                     *TINY_FLAGS)
  assert again.returncode == 0 and again.stdout == ""
  assert "3 runs, 3 made with these settings, 0 to run in 0 jobs" in again.stderr
