"""The UCI binary end to end on real data at tiny scale.

Every method, results files, resume, bad input.
"""
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from tests.method_runs import MethodRuns
from tests.usage_runs import UsageRuns
from uci import main as uci_main
from uci.config import METHODS, UciConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = dict(dataset="yacht_hydrodynamics", download=False, hidden_units=16,
            vi_steps=400, num_samples=4, steps_per_auxiliary=40, elbo_num_samples=2, mnf_steps=100,
            ensemble_members=3, ensemble_steps=150, steps_per_checkpoint=200, num_particles=4,
            particle_epochs=20)


@pytest.fixture(name="yacht_dir")
def _yacht_dir(data_dir_for):
  return data_dir_for("yacht_hydrodynamics")


@pytest.fixture(name="tiny")
def _tiny(yacht_dir):
  """TINY reading yacht from the data folder."""
  return dict(TINY, data_dir=yacht_dir)


@pytest.fixture(name="quick")
def _quick(tiny):
  """TINY with fewer steps, for tests of which runs are made and what they record, not of what
  they learn."""
  return dict(tiny, vi_steps=100, steps_per_checkpoint=100, steps_per_auxiliary=10)


@pytest.fixture(scope="module")
def method_runs(tmp_path_factory, data_dir_for):
  """Every method's run of TINY on yacht with the compiled loop, UCI's default; made once and
  shared by the tests below."""
  return MethodRuns(uci_main.train_and_evaluate, UciConfig, tmp_path_factory.mktemp("methods"),
                    data_dir=data_dir_for("yacht_hydrodynamics"), **TINY)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_writes_its_metrics(method_runs, method):
  """Through `train_and_evaluate` (as a script would call it) with the compiled loop, UCI's
  default: every method's training step compiles with XLA (the proxy for TPU), and the run is the
  compiled one. (Refinement's compiled chunks, not UCI's default, are refined_vi_binary's below.)"""
  metrics, results = method_runs(method)
  assert results["flags"]["jit_compile"] and results["flags"]["noise_chunk_steps"] == 100
  assert results["benchmark"] == "uci" and results["dataset"] == "yacht_hydrodynamics"
  assert results["method"] == method and results["metrics"] == pytest.approx(metrics)
  assert metrics["num_train"] == 246 and metrics["num_test"] == 62
  assert -10 < metrics["test_mll"] < 0 and 0 < metrics["test_rmse"] < 20   # yacht's y spans 0..62
  assert {"train_seconds", "total_seconds"} <= set(results["timings"])
  if method in ("vi", "refined_vi", "vi_equal_compute", "vogn", "refined_vogn"):
    assert metrics["elbo"] < 0
  if method in ("refined_vi", "refined_vogn"):
    assert metrics["elbo_aux"] > metrics["elbo"]
    assert results["timings"]["refine_seconds"] > 0
  if method == "vi_equal_compute":
    # Mutation: training zero extra steps (total = vi_steps) fails here.
    assert metrics["total_vi_steps"] == 400 + 4 * 5 * 40   # the steps taken, read off the trainer
  if method in ("mnf", "deep_ensemble", "vi", "vogn", "svgd", "fsvgd"):
    assert "elbo_aux" not in metrics
  if method in ("svgd", "fsvgd"):
    # 20 epochs of the f-POVI protocol's batch 100 on 246 examples: 3 steps each.
    assert metrics["particle_steps"] == 60 and metrics["particle_batch_size"] == 100
  if method == "vogn":
    assert metrics["vogn_resumed_from_step"] == 0


@pytest.fixture(scope="module")
def vi_binary(tmp_path_factory, data_dir_for):
  """VI through the binary, uncompiled with 50-step chunks, at TINY's settings and 100 steps:
  (its flags, its output folder, its settings); made once for the tests below. Uncompiled: the
  chunks' draws are XLA's too, and the runs skip an XLA compile each, most of their time."""
  settings = {**TINY, "data_dir": data_dir_for("yacht_hydrodynamics"), "vi_steps": 100}
  flags = ["--method=vi", "--noise_chunk_steps=50", "--nojit_compile",
           *[f"--{name}={value}" for name, value in settings.items()]]
  out = tmp_path_factory.mktemp("vi_binary") / "run"
  completed = _run(f"--output_dir={out}", *flags)
  assert completed.returncode == 0, completed.stderr[-2000:]
  return flags, out, settings


def test_train_and_evaluate_runs_the_loop_its_config_records(tmp_path, vi_binary):
  """The bug: called from a script (not through the binary's main), train_and_evaluate ignored
  --noise_chunk_steps and drew inside each step, while its results.json recorded the chunks.
  Runs with and without chunks must see other draws, and the chunked one must equal the binary's
  run with the same flags. Uncompiled: uncompiled, a run may also draw inside each step, which
  the bug did."""
  _, made, settings = vi_binary
  short = {**settings, "jit_compile": False}
  inside = uci_main.train_and_evaluate(UciConfig(method="vi", noise_chunk_steps=0, **short),
                                       str(tmp_path / "inside"))
  chunked = uci_main.train_and_evaluate(UciConfig(method="vi", noise_chunk_steps=50, **short),
                                        str(tmp_path / "chunked"))
  assert chunked["elbo"] != inside["elbo"]
  binary = json.loads((made / "results.json").read_text())["metrics"]
  assert binary["elbo"] == pytest.approx(chunked["elbo"], rel=1e-6)


def test_refined_and_vi_runs_share_one_checkpoint(method_runs):
  first, _ = method_runs("vi")
  second, _ = method_runs("refined_vi")
  assert first["vi_resumed_from_step"] == 0 and second["vi_resumed_from_step"] == 400
  assert abs(first["elbo"] -
             second["elbo"]) < 0.05 * abs(first["elbo"])  # same model, a fresh ELBO estimate


def test_metrics_are_in_the_original_units_of_y(tmp_path, monkeypatch, method_runs):
  """y -> 10 y + 3 leaves the standardised problem unchanged, so the test MLL moves by exactly
  -log 10 and the RMSE scales by 10. Mutation: metrics computed in standardised units (MLL
  unchanged) fail here."""
  from uci import data
  load = data.load
  original, _ = method_runs("vi")
  monkeypatch.setattr(data, "load", lambda *args: (lambda x, y: (x, 10.0 * y + 3.0))(*load(*args)))
  scaled, _ = method_runs.run("vi", tmp_path / "scaled", vi_checkpoint_dir=None)
  assert scaled["target_std"] == pytest.approx(10 * original["target_std"], rel=1e-9)
  assert scaled["test_mll"] == pytest.approx(original["test_mll"] - math.log(10.0), abs=1e-3)
  assert scaled["test_rmse"] == pytest.approx(10 * original["test_rmse"], rel=1e-3)
  assert scaled["calibration_error"] == pytest.approx(original["calibration_error"], abs=1e-3)


def test_refined_vogn_refines_the_vogn_runs_posterior(method_runs):
  """vogn and refined_vogn of one dataset and seed share the VOGN checkpoint (in the VI
  checkpoint folder's vogn/), refinement raises ELBO_aux above the VOGN posterior's ELBO, and a VI
  run beside them keeps its own checkpoint."""
  vogn, _ = method_runs("vogn")
  refined, _ = method_runs("refined_vogn")
  vi, _ = method_runs("vi")
  assert vogn["vogn_resumed_from_step"] == 0 and refined["vogn_resumed_from_step"] == 400
  assert vi["vi_resumed_from_step"] == 0
  assert refined["elbo_aux"] > refined["elbo"]
  assert (method_runs.checkpoint_dir / "vogn" / "settings.json").exists()


def test_a_rerun_with_other_settings_never_resumes_silently(tmp_path, quick):
  """A seed-1 run given seed 0's VI checkpoint or output directory stops with the differing flag.

  Mutation: resuming without comparing the recorded settings (the bug this replaced: seed 0's model
  evaluated on seed 1's split) makes these pass silently and fails here. Uncompiled: what is
  compared is the settings, and the two runs that train skip an XLA compile each (most of their
  time)."""
  tiny = {**quick, "jit_compile": False}
  shared = str(tmp_path / "vi_checkpoint")
  uci_main.train_and_evaluate(UciConfig(method="vi", vi_checkpoint_dir=shared, **tiny),
                              str(tmp_path / "s0"))
  with pytest.raises(ValueError, match=r"--seed=1 \(checkpoint: 0\)"):
    uci_main.train_and_evaluate(UciConfig(method="vi", seed=1, vi_checkpoint_dir=shared, **tiny),
                                str(tmp_path / "s1"))
  replaced = uci_main.train_and_evaluate(
      UciConfig(method="vi", seed=1, vi_checkpoint_dir=shared, replace_mismatched=True, **tiny),
      str(tmp_path / "s1"))
  assert replaced["vi_resumed_from_step"] == 0
  flags = ["--method=vi", "--nojit_compile",
           *[f"--{name}={value}" for name, value in tiny.items() if name != "jit_compile"]]
  completed = _run(f"--output_dir={tmp_path / 's0'}", "--seed=2", *flags)
  assert completed.returncode == 2
  assert completed.stderr.strip().splitlines() == [
      f"error: {tmp_path / 's0' / 'results.json'} was made with other settings: "
      "--seed=2 (recorded: 0); "
      "use another --output_dir, or --replace_mismatched to rerun"
  ]
  same = _run(f"--output_dir={tmp_path / 's0'}", f"--vi_checkpoint_dir={shared}", *flags)
  assert same.returncode == 0 and "already holds this run" in same.stdout
  # Refused by the checkpoint, a run in a new output directory leaves no directory behind.
  # Mutation: keeping the directory created before the refusal fails here.
  fresh = tmp_path / "s2"
  refused = _run(f"--output_dir={fresh}", f"--vi_checkpoint_dir={shared}", "--seed=2", *flags)
  assert refused.returncode == 2 and "--seed=2 (checkpoint: 1)" in refused.stderr
  assert not fresh.exists()
  # A run recorded before --noise_chunk_steps existed drew its noise inside each step: not today's
  # default (100) for UCI.
  path = tmp_path / "s0" / "results.json"
  record = json.loads(path.read_text())
  del record["flags"]["noise_chunk_steps"]
  path.write_text(json.dumps(record))
  older = _run(f"--output_dir={tmp_path / 's0'}", f"--vi_checkpoint_dir={shared}", *flags)
  assert older.returncode == 2
  assert "--noise_chunk_steps=100 (recorded: 0)" in older.stderr.strip().splitlines()[-1]


def test_output_dir_problems_are_one_line_before_any_work(refusals):
  a_file = refusals.a_file
  completed = refusals.run(f"--output_dir={a_file}")
  assert completed.returncode == 2
  assert completed.stderr.strip().splitlines() == [
      f"error: --output_dir={a_file} is a file; it must be a directory (or not exist yet)"]
  assert refusals.run().stderr.strip().splitlines() == ["error: --output_dir is required"]


def test_help_lists_every_setting_with_its_help_text(refusals):
  """--helpfull lists every setting (each method's under its module); --help the benchmark's."""
  completed = refusals.run("--helpfull")
  assert completed.returncode == 0
  for field in dataclasses.fields(UciConfig):
    assert (f"--{field.name}" in completed.stdout or
            f"--[no]{field.name}" in completed.stdout), field.name
  assert "See UciConfig" not in completed.stdout
  assert "methods.vi:" in completed.stdout and "Adam steps of mean-field VI." in completed.stdout
  short = refusals.run("--help")
  assert short.returncode == 0 and "--dataset" in short.stdout and "--seed" in short.stdout


def _run(*args):
  return subprocess.run([sys.executable, "-m", "uci.main", *args], cwd=REPO, capture_output=True,
                        text=True, timeout=300, env={
                            **os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"
                        })


def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path, vi_binary):
  """A run whose results.json is gone resumes from its last checkpoint, on the threads it is
  given. Catches a checkpoint not restored (planted: `_restore` finding none; resumed from step 0,
  fails) and --intra_op_threads ignored. A copy of the shared binary run, whose last checkpoint is
  its last step."""
  flags, made, _ = vi_binary
  out = tmp_path / "run"
  shutil.copytree(made, out)
  # By default VI keeps TensorFlow's threads (0 records "its choice"); the refined methods and the
  # ensemble take one (test_refined_methods_and_the_ensemble_take_one_thread_unless_told_...).
  expected_threads = int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0") or 0)
  assert json.loads((out / "results.json").read_text())["machine"]["intra_op_threads"] == (
      expected_threads)
  (out / "results.json").unlink()            # as if the run had died after its last checkpoint
  completed = _run(f"--output_dir={out}", *flags, "--intra_op_threads=2")
  assert completed.returncode == 0, completed.stderr[-2000:]
  results = json.loads((out / "results.json").read_text())
  assert results["metrics"]["vi_resumed_from_step"] == 100
  assert results["machine"]["intra_op_threads"] == 2


def test_refined_methods_and_the_ensemble_take_one_thread_unless_told_otherwise(monkeypatch):
  """--intra_op_threads=-1 (the default) resolves by method. Catches the refined methods left on
  every core (a whole Boston run 5 % slower), the ensemble too (its step 1.5x slower), and a
  by-method choice that overrides a user's explicit setting or $TF_NUM_INTRAOP_THREADS."""
  monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
  methods = ("refined_vi", "refined_vogn", "deep_ensemble", "vi", "mnf", "svgd")
  assert [UciConfig(method=method).thread_count() for method in methods] == [1, 1, 1, 0, 0, 0]
  assert UciConfig(method="refined_vi", intra_op_threads=2).thread_count() == 2
  assert UciConfig(method="refined_vi", intra_op_threads=0).thread_count() == 0
  monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "2")
  assert UciConfig(method="refined_vi").thread_count() == 0


def test_refinement_prepared_beside_vi_gives_the_same_run(tmp_path, tiny):
  """By default the refiner is built before VI and traced on a second thread while VI trains
  (from VI's second chunk); the run's numbers are exactly those of building and tracing it when
  refinement starts (--noprepare_refinement). Catches a preparation that changes the run:
  members built before VI drawing what VI would have drawn, state the preparation leaves in the
  members or the training loop (planted: refine() not reseeding the minibatch stream; fails), VI's
  numbers disturbed by the second thread. Uncompiled: UCI's refinement is uncompiled by default
  anyway, so only VI's chunks lose XLA, and the two runs skip its compile (most of their time)."""
  runs = {}
  # VI's 200 steps are two chunks of the default 100: the second one trains beside the preparation.
  settings = dict(tiny, vi_steps=200, num_samples=2, steps_per_auxiliary=20)
  for prepare in (True, False):
    config = UciConfig(method="refined_vi", prepare_refinement=prepare, jit_compile=False,
                       **settings)
    uci_main.train_and_evaluate(config, str(tmp_path / str(prepare)))
    runs[prepare] = json.loads((tmp_path / str(prepare) / "results.json").read_text())
  assert runs[True]["metrics"] == runs[False]["metrics"]
  assert runs[True]["timings"]["refine_prepare_seconds"] > 0
  assert "refine_prepare_seconds" not in runs[False]["timings"]
  for timings in (runs[True]["timings"], runs[False]["timings"]):
    assert 0 < timings["refine_build_seconds"] < timings["refine_total_seconds"]


@pytest.fixture(scope="module")
def refined_vi_binary(tmp_path_factory, data_dir_for):
  """refined_vi through the binary at tiny scale, XLA's chunks of 50 steps (VI's 50 steps one
  chunk), by default and with --jit_compile_refinement, each with its own --xla_cache_dir: {name:
  (results.json, sorted cache listing just after the run, output dir)}, with the flags and the
  root; made once for the tests of what each compiles."""
  root = tmp_path_factory.mktemp("refined_vi_binary")
  flags = ["--method=refined_vi", "--dataset=yacht_hydrodynamics",
           f"--data_dir={data_dir_for('yacht_hydrodynamics')}", "--hidden_units=8",
           "--vi_steps=50", "--num_samples=2", "--num_auxiliary=2", "--steps_per_auxiliary=30",
           "--elbo_num_samples=1", "--jit_compile", "--noise_chunk_steps=50"]
  runs = {}
  for name, extra in (("default", []), ("compiled", ["--jit_compile_refinement"])):
    out, cache = root / name, root / f"{name}_cache"
    completed = _run(*flags, *extra, f"--output_dir={out}", f"--xla_cache_dir={cache}",
                     f"--vi_checkpoint_dir={root / (name + '_vi')}")
    assert completed.returncode == 0, completed.stderr[-2000:]
    runs[name] = (json.loads((out / "results.json").read_text()), sorted(os.listdir(cache)), out)
  return dict(runs=runs, flags=flags, root=root)


def test_by_default_refinement_runs_its_chunks_uncompiled_with_the_same_numbers(
    refined_vi_binary):
  """UCI compiles VI's chunks but not refinement's (`--nojit_compile_refinement`, its default):
  XLA's persistent cache shows what was compiled, one computation fewer than with
  `--jit_compile_refinement` (catches the refinement setting ignored, either way), and both runs
  see the same numbers, so the metrics agree to XLA's round-off."""
  (default, default_cached, _), (compiled, compiled_cached, _) = (
      refined_vi_binary["runs"][name] for name in ("default", "compiled"))
  assert default["flags"]["jit_compile_refinement"] is False
  # refined_vi's one intra-op thread, through the binary (unless the environment sets them).
  assert default["machine"]["intra_op_threads"] == int(
      os.environ.get("TF_NUM_INTRAOP_THREADS", "1") or 1)
  assert len(default_cached) >= 1
  assert len(compiled_cached) == len(default_cached) + 1
  for metric in ("elbo", "elbo_aux", "test_mll", "test_rmse"):
    assert default["metrics"][metric] == pytest.approx(
        compiled["metrics"][metric], rel=1e-4, abs=1e-4), metric


def test_by_default_the_ensemble_runs_its_chunks_uncompiled_with_the_same_numbers(tmp_path,
                                                                                  yacht_dir):
  """UCI compiles VI's chunks but not the deep ensemble's (`--nojit_compile_ensemble`, its
  default: its batched member products run slower under XLA on a CPU). XLA's persistent cache
  shows what was compiled: nothing by default, the ensemble's chunk with
  `--jit_compile_ensemble` (catches the setting ignored, either way); both runs see the same
  batches, so their metrics agree to XLA's round-off, and the default takes one thread."""
  flags = ["--method=deep_ensemble", "--dataset=yacht_hydrodynamics", f"--data_dir={yacht_dir}",
           "--hidden_units=8", "--ensemble_members=3", "--ensemble_steps=120",
           "--noise_chunk_steps=50"]
  runs = {}
  for name, extra in (("default", []), ("compiled", ["--jit_compile_ensemble"])):
    cache = tmp_path / (name + "_cache")
    completed = _run(*flags, *extra, f"--output_dir={tmp_path / name}", f"--xla_cache_dir={cache}")
    assert completed.returncode == 0, completed.stderr[-2000:]
    runs[name] = json.loads((tmp_path / name / "results.json").read_text())
    runs[name]["cached"] = len(os.listdir(cache)) if cache.is_dir() else 0
  assert runs["default"]["flags"]["jit_compile_ensemble"] is False
  assert runs["default"]["machine"]["intra_op_threads"] == int(
      os.environ.get("TF_NUM_INTRAOP_THREADS", "1") or 1)
  assert runs["default"]["cached"] == 0
  assert runs["compiled"]["cached"] >= 1
  for metric in ("test_mll", "test_rmse"):
    assert runs["default"]["metrics"][metric] == pytest.approx(
        runs["compiled"]["metrics"][metric], rel=1e-4, abs=1e-4), metric


def test_xla_compiled_chunks_run_refined_vi_and_a_changed_chunk_length_is_not_resumed(
    refined_vi_binary, yacht_dir):
  """--jit_compile with --noise_chunk_steps end to end; the chunk length decides which numbers the
  run sees, so a checkpoint made with another is refused rather than mixed in.

  With --xla_cache_dir the compiled chunks are kept, and a rerun that loads them gets the same
  numbers: catches a cache that is never written (the flag set after TensorFlow read it) and one
  that hands a run another computation's executable.

  Each loop is one progress piece (VI's 50 steps are one chunk), so the rerun makes the same calls
  whatever the machine's load: XLA's cache key holds TensorFlow's function names, which count
  every operation run before, and VI cut into pieces by the clock (50 + 70 steps, or 50 + 50 +
  20) renamed, and recompiled, refinement's chunk."""
  results, cached, out = refined_vi_binary["runs"]["compiled"]
  flags, root = refined_vi_binary["flags"], refined_vi_binary["root"]
  cache = root / "compiled_cache"
  assert results["flags"]["jit_compile"] and results["flags"]["noise_chunk_steps"] == 50
  assert results["flags"]["jit_compile_refinement"]
  assert results["metrics"]["elbo_aux"] > results["metrics"]["elbo"]
  assert len(cached) >= 2, cached        # at least VI's chunk and refinement's
  rerun = _run(*flags, "--jit_compile_refinement", f"--xla_cache_dir={cache}",
               f"--output_dir={root / 'rerun'}", f"--vi_checkpoint_dir={root / 'rerun_vi'}")
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert json.loads((root / "rerun" / "results.json").read_text())["metrics"] == pytest.approx(
      results["metrics"], rel=1e-6)
  assert sorted(os.listdir(cache)) == cached
  # VI's checkpoint of 50-step chunks, given to a run of the default 100 (the fixture's other
  # settings): refused. In-process: a checkpoint's refusal through the binary, in one line, is
  # test_a_rerun_with_other_settings_never_resumes_silently's.
  with pytest.raises(ValueError, match="noise_chunk_steps"):
    uci_main.train_and_evaluate(UciConfig(
        method="vi_equal_compute", dataset="yacht_hydrodynamics", data_dir=yacht_dir,
        hidden_units=8, vi_steps=50, num_samples=2, num_auxiliary=2, steps_per_auxiliary=30,
        elbo_num_samples=1, jit_compile=True, vi_checkpoint_dir=str(root / "compiled_vi")),
        str(root / "eq"))


BAD_FLAGS = [
    (["--dataset=boston"], 2, "value should be one of"),
    (["--method=sgld"], 2, "value should be one of"),
    (["--num_samples=0"], 2, "num_samples=0 is out of range; allowed: >= 1"),
    (["--variance_ratio=1.0"], 2, "variance_ratio=1.0 is out of range; allowed: > 0 and < 1"),
    (["--refine_learning_rate_rule=fast"], 2, "value should be one of <paper|authors_code>"),
    (["--learning_rate=inf"], 2, "learning_rate=inf must be a finite number"),
    (["--initial_noise_scale=nan"], 2, "initial_noise_scale=nan must be a finite number"),
    (["--intra_op_threads=-2"], 2, "intra_op_threads=-2 is out of range; allowed: >= -1"),
    (["--noise_chunk_steps=-1"], 2, "noise_chunk_steps=-1 is out of range; allowed: >= 0"),
    (["--noise_chunk_steps=10001"], 2, "noise_chunk_steps=10001 is out of range"),
    (["--noise_chunk_steps=0"], 2,
     "--jit_compile needs the noise drawn ahead of the compiled steps; allowed: "
     "--noise_chunk_steps > 0 (e.g. 100) with it, or --nojit_compile"),
    (["--nojit_compile", "--xla_cache_dir=xla"], 2, "nothing is compiled without --jit_compile"),
    (["--nojit_compile", "--jit_compile_refinement"], 2,
     "--jit_compile_refinement does nothing without --jit_compile; allowed: it with --jit_compile"),
    (["--nojit_compile", "--jit_compile_ensemble"], 2,
     "--jit_compile_ensemble does nothing without --jit_compile"),
    (["--vogn_tempering=0"], 2, "vogn_tempering=0.0 is out of range; allowed: > 0 and <= 10"),
    (["--vogn_damping=-1"], 2, "vogn_damping=-1.0 is out of range; allowed: >= 0"),
    (["--vogn_mc_samples=0"], 2, "vogn_mc_samples=0 is out of range; allowed: >= 1"),
    (["--vogn_momentum=1"], 2, "vogn_momentum=1.0 is out of range; allowed: >= 0 and < 1"),
    (["--vogn_curvature=hessian"], 2, "value should be one of"),
    (["--num_particles=1"], 2, "num_particles=1 is out of range; allowed: >= 2"),
    (["--method=fsvgd", "--fsvgd_prior_points=9", "--fsvgd_extra_batch=4"], 2,
     "--fsvgd_extra_batch=4 cannot hold the 5 prior points of --fsvgd_prior_points=9"),
    (["--method=mnf", "--num_hidden_layers=2"], 2, "the MNF network has one hidden layer"),
    (["--variance_ratio=0.99999999"
     ], 2, "rounds to the remaining fraction 1 it is taken from in float32"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
  """The binary's runs with each of BAD_FLAGS, with --help/--helpfull, without --output_dir and
  with an --output_dir that is a file (`refusals.a_file`), made together."""
  root = tmp_path_factory.mktemp("refusals")
  a_file = root / "a_file"
  a_file.write_text("")
  runs = UsageRuns("uci.main", root / "runs",
                   [["--helpfull"], ["--help"], [], [f"--output_dir={a_file}"],
                    *[[f"--output_dir={UsageRuns.OUTPUT_DIR}", *flags]
                      for flags, _, _ in BAD_FLAGS]],
                   environment={"TF_CPP_MIN_LOG_LEVEL": "2"})
  runs.a_file = a_file
  return runs


@pytest.mark.parametrize("flags,status,message", BAD_FLAGS)
def test_bad_flags_give_one_line_and_no_results(refusals, flags, status, message):
  """Each bad value is refused before TensorFlow loads: the error line is the only stderr line."""
  completed, output_dir = refusals.in_output_dir(*flags)
  assert completed.returncode == status
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
  assert not output_dir.exists()


def test_bad_data_is_a_runtime_error_without_results(tmp_path, monkeypatch, yacht_dir):
  """A corrupt or missing file ends the run with one line and exit 1 before TensorFlow loads
  (here it cannot: a `tensorflow` that fails to import comes first on the path), leaving no
  output folder. Catches `Config.locate_data` not called before start-up (planted: the error is
  then the import's), where TensorFlow's and the devices' start-up (a minute on a TPU) came
  before the error."""
  no_tensorflow = tmp_path / "no_tensorflow" / "tensorflow"
  no_tensorflow.mkdir(parents=True)
  (no_tensorflow / "__init__.py").write_text("raise ImportError('tensorflow was imported')\n")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(no_tensorflow.parent), REPO]))
  corrupted = tmp_path / "data"
  shutil.copytree(os.path.join(yacht_dir, "uci", "yacht_hydrodynamics"),
                  corrupted / "yacht_hydrodynamics")
  with open(corrupted / "yacht_hydrodynamics" / "data.txt", "a") as handle:
    handle.write("0 0 0 0 0 0 0\n")
  completed = _run(f"--output_dir={tmp_path / 'out'}", "--dataset=yacht_hydrodynamics",
                   f"--data_dir={corrupted}")
  assert completed.returncode == 1
  lines = completed.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: checksum mismatch"), lines
  empty = tmp_path / "empty"
  empty.mkdir()
  completed = _run(f"--output_dir={tmp_path / 'out'}", "--dataset=kin8nm", f"--data_dir={empty}",
                   "--nodownload")
  lines = completed.stderr.strip().splitlines()
  assert completed.returncode == 1 and len(lines) == 1 and "downloading is off" in lines[0], lines
  assert not (tmp_path / "out").exists()


def test_run_table_refines_a_variant_from_an_existing_tables_vi_models(tmp_path, quick):
  """run_table.sh: a refinement variant in a new output root reuses another's VI checkpoints.
  Uncompiled (the test is about which runs run_table.sh makes and what it says; its two runs that
  train skip an XLA compile each, most of their time)."""
  tiny = quick
  tiny_flags = ["--nojit_compile",
                *[f"--{name}={value}" for name, value in tiny.items() if name != "dataset"]]

  def run_table(*arguments, extra_flags=()):
    return subprocess.run([
        "bash",
        os.path.join(REPO, "uci", "run_table.sh"), "--datasets=yacht_hydrodynamics", "--seeds=0",
        *arguments, "--", *tiny_flags, *extra_flags
    ], capture_output=True, text=True, cwd=REPO)
  table, variant = tmp_path / "table", tmp_path / "variant"
  first = run_table(f"--output_root={table}", "--methods=vi")
  assert "done yacht_hydrodynamics vi seed 0" in first.stdout, first.stdout + first.stderr
  second = run_table(f"--output_root={variant}", f"--vi_checkpoint_root={table}",
                     "--methods=refined_vi", extra_flags=["--refine_weight_noise=per_batch"])
  assert "done yacht_hydrodynamics refined_vi seed 0" in second.stdout, (
      second.stdout + second.stderr)
  results = json.loads((variant / "uci" / "yacht_hydrodynamics" / "refined_vi" / "seed_0" /
                        "results.json").read_text())
  assert results["metrics"]["vi_resumed_from_step"] == tiny["vi_steps"]
  assert results["flags"]["refine_weight_noise"] == "per_batch"
  assert not (variant / "uci" / "yacht_hydrodynamics" / "vi_checkpoints").exists()
  # One line per finished run: a running count and the run's headline metrics.
  assert "[1/1] done yacht_hydrodynamics vi seed 0: test_mll: -" in first.stdout, first.stdout
  assert "test_rmse: " in first.stdout
  rerun = run_table(f"--output_root={table}", "--methods=vi")
  assert rerun.returncode == 0 and (
      "[1/1] done yacht_hydrodynamics vi seed 0: already made with these settings" in rerun.stdout)
  other = run_table(f"--output_root={table}", "--methods=vi", extra_flags=["--learning_rate=0.002"])
  assert other.returncode == 1, other.stdout + other.stderr
  assert ("FAILED yacht_hydrodynamics vi seed 0: error: " in other.stderr and
          "--learning_rate=0.002 (recorded: 0.001)" in other.stderr and
          "1 run(s) failed" in other.stderr)
  bad = run_table("--output_root=x", "--vi_checkpoints=y")
  assert bad.returncode == 2 and "unknown argument '--vi_checkpoints=y'" in bad.stderr
