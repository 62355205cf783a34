"""report.related_table: the comparison of related methods with the VI family; and
report.remake_commands: the commands that remake its runs."""
import json
import math
import os
import subprocess

import pandas as pd
import pytest

from common.config import recorded_config
from report import related_table, remake_commands


def _runs():
  rows = []
  for seed, (vi, refined, vogn) in enumerate([(-2.0, -1.9, -2.2), (-3.0, -2.8, -2.9)]):
    rows += [dict(dataset="d", method="vi", seed=seed, test_mll=vi, train_seconds=10.0),
             dict(dataset="d", method="refined_vi", seed=seed, test_mll=refined,
                  train_seconds=10.0, refine_total_seconds=5.0),
             dict(dataset="d", method="vogn", seed=seed, test_mll=vogn, train_seconds=4.0)]
  return pd.DataFrame(rows)


def test_paired_differences_are_per_seed_and_signed():
  """Refined VI beats VI by 0.1 and 0.2 on the two seeds: mean 0.15, s.e. 0.05, 2/2; VOGN
  against VI: -0.2 and +0.1. Catches differences taken between unpaired seeds or reversed."""
  lines = related_table.paired_differences(_runs(), "test_mll")
  refined = next(line for line in lines if line.startswith("| Refined VI − VI |"))
  assert "| 2 | 0.150 ± 0.050 | 2/2 |" in refined
  vogn = next(line for line in lines if line.startswith("| VOGN − VI |"))
  assert "| -0.050 ± 0.150 | 1/2 |" in vogn
  assert not any(line.startswith("| Refined VOGN") for line in lines)   # no such runs


def test_standings_call_a_difference_only_beyond_two_standard_errors_of_paired_seeds():
  """SVGD against refined VI on four datasets: +1 on every seed of "up", -1 on every seed of
  "down" (beyond 2 s.e.), +/-0.3 about a +0.1 mean on "flat" (within them), and "few" with two
  seeds. Catches unpaired or reversed differences, a noisy mean called a win, and a two-seed
  difference (whose s.e. says little) counted at all."""
  rows = []
  for seed in range(4):
    refined = {"up": 0.0, "down": 0.0, "flat": 0.0, "few": 0.0}
    svgd = {"up": 1.0 + 0.01 * seed, "down": -1.0 - 0.01 * seed,
            "flat": 0.1 + (0.3 if seed % 2 else -0.3), "few": 5.0}
    for dataset in refined:
      if dataset == "few" and seed > 1:
        continue
      rows += [dict(dataset=dataset, method="refined_vi", seed=seed, test_mll=refined[dataset]
                    + seed),
               dict(dataset=dataset, method="svgd", seed=seed, test_mll=svgd[dataset] + seed)]
  lines = related_table.standings(pd.DataFrame(rows), "test_mll")
  assert lines == ["- **SVGD − Refined VI**: better on up (+1.015); worse on down (-1.015); "
                   "level on flat; fewer than 3 seeds on few (2)."]
  # A diverged seed is no tie.
  rows += [dict(dataset="lost", method=method, seed=seed,
                test_mll=-math.inf if (method, seed) == ("svgd", 0) else 0.0)
           for method in ("refined_vi", "svgd") for seed in range(3)]
  assert related_table.standings(pd.DataFrame(rows), "test_mll")[0].endswith(
      "; not finite on lost.")


def test_compute_counts_refinement_on_top_of_training():
  runs = _runs()
  assert list(related_table.compute_seconds(runs)) == pytest.approx([10, 15, 4, 10, 15, 4])


def test_metric_table_lists_each_method_with_its_seed_count():
  lines = related_table.metric_table(_runs(), ("vi", "refined_vi", "vogn", "refined_vogn"),
                                     "test_mll", ",.2f")
  assert lines[0] == "| dataset | VI | Refined VI | VOGN |"
  assert lines[2].startswith("| d | -2.50 ± 0.71 (2) | -2.35 ± 0.64 (2) | -2.55 ± 0.49 (2) |")


def test_fpovi_table8_sets_our_runs_beside_the_published_numbers(tmp_path):
  """Two Boston splits of f-SVGD with NLL 2.3 and 2.5 (MLL -2.3, -2.5): mean 2.40, s.e. 0.10,
  beside the paper's 2.33 ± 0.05, 0.07 / hypot(0.10, 0.05) = 0.6 combined standard errors
  above. Catches MLL shown unnegated or a standard deviation shown as the standard error."""
  import json
  from report import uci_related_table
  for seed, (mll, rmse) in enumerate([(-2.3, 2.5), (-2.5, 2.9)]):
    folder = tmp_path / "boston_housing" / "fsvgd" / f"seed_{seed}"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(dict(
        benchmark="uci", dataset="boston_housing", method="fsvgd", seed=seed,
        git_commit="abc", flags={}, timings={"train_seconds": 5.0},
        metrics=dict(test_mll=mll, test_rmse=rmse, target_std=9.0, num_train=455))))
  text = uci_related_table.fpovi_table8_text(str(tmp_path))
  row = next(line for line in text.splitlines() if line.startswith("| boston_housing"))
  assert row == ("| boston_housing | f-SVGD | 2 | 2.40 ± 0.10 | 2.33 ± 0.05 | 2.70 ± 0.20 | "
                 "2.58 ± 0.12 | +0.6 |")


def _write_image_run(folder, method, seed, test_mll, accuracy):
  import json
  folder.mkdir(parents=True)
  (folder / "results.json").write_text(json.dumps(dict(
      benchmark="image", dataset="mnist", method=method, seed=seed, git_commit="abc", flags={},
      timings={"train_seconds": 100.0},
      metrics=dict(test_mll=test_mll, test_accuracy=accuracy, ece=0.01, brier=0.02))))


def test_image_table_sets_vogn_beside_table_2s_runs(tmp_path):
  """VOGN's LeNet-5 runs (the related folder) and Table 2's (the results folder) meet in one
  table, paired by seed. Catches the related folder being read as Table 2's or skipped."""
  from report import image_related_table
  for seed, mll in enumerate([-0.03, -0.04]):
    _write_image_run(tmp_path / "image" / "mnist" / "vi" / f"seed_{seed}", "vi", seed, mll, 0.99)
  _write_image_run(tmp_path / "related" / "mnist" / "vogn" / "seed_0", "vogn", 0, -0.05, 0.98)
  text = image_related_table.write_table(str(tmp_path / "image"), str(tmp_path / "related"),
                                         str(tmp_path))
  assert (tmp_path / "image_table.md").read_text() == text
  assert "| mnist | -0.0350 ± 0.0071 (2) | -0.0500 (1) |" in text
  assert "| VOGN − VI | mnist | 1 | -0.020 | 0/1 |" in text


def _write_uci_record(path, method, dataset, seed, commit="abc", **changes):
  from uci.config import UciConfig
  flags = {**UciConfig(method=method, dataset=dataset, seed=seed).as_dict(), **changes}
  for name in [name for name, value in changes.items() if value is None]:
    del flags[name]   # recorded before the setting existed
  path.mkdir(parents=True)
  (path / "results.json").write_text(json.dumps(dict(
      benchmark="uci", dataset=dataset, method=method, seed=seed, git_commit=commit, flags=flags,
      metrics={"test_mll": -1.0, "target_std": 1.0}, timings={"train_seconds": 1.0})))


def test_commands_are_read_from_each_runs_recorded_settings(tmp_path):
  """The runs: vi and vogn on boston seeds 0-1 (vogn recorded before --noise_chunk_steps and
  --vogn_prior_decay existed), vogn on wine seed 0 only, an empirical-Bayes VOGN recorded before
  the decay existed, and a run outside the run_table layout. Catches: seeds pooled across datasets
  (a command claiming wine seed 1), runs made at different code on one line (boston's two VOGN
  seeds), a setting missing from a record taken as today's default
  (the per-step draws, the decay 0 of the first EB runs; the uncompiled loop of runs made before
  --jit_compile, whose command otherwise asked for XLA with per-step draws: a usage error), and a
  setting shown where it does nothing (the decay under the fixed prior)."""
  from report import uci_table
  from uci.config import UciConfig
  root = tmp_path / "results"
  for seed in (0, 1):
    _write_uci_record(root / "uci" / "boston_housing" / "vi" / f"seed_{seed}", "vi",
                      "boston_housing", seed)
    _write_uci_record(root / "uci" / "boston_housing" / "vogn" / f"seed_{seed}", "vogn",
                      "boston_housing", seed, commit=f"{seed}" * 40, noise_chunk_steps=None,
                      jit_compile=None, vogn_prior_decay=None)
  _write_uci_record(root / "uci" / "wine" / "vogn" / "seed_0", "vogn", "wine", 0,
                    noise_chunk_steps=None, jit_compile=None, vogn_prior_decay=None)
  _write_uci_record(root / "eb" / "uci" / "wine" / "vogn" / "seed_0", "vogn", "wine", 0,
                    vogn_prior="empirical_bayes", vogn_prior_decay=None)
  _write_uci_record(root / "probe", "vi", "wine", 3, commit="f" * 40 + "-dirty", hidden_units=20)
  # run_table.sh --variant's layout (<root>/uci/<dataset>/<variant>/<method>/seed_<s>) is not
  # read as a benchmark named after the dataset.
  _write_uci_record(root / "uci" / "wine" / "wide" / "vi" / "seed_0", "vi", "wine", 0,
                    hidden_units=100)
  runs = uci_table.load_runs(str(root))
  assert remake_commands.reproduction_commands(runs, UciConfig) == [
      f"- `common/run_table.sh --benchmark=uci --output_root={root} --datasets=\"boston_housing\" "
      "--seeds=\"0\" --methods=\"vogn\" -- --noise_chunk_steps=0 --nojit_compile` "
      "(code `0000000`, which had no --noise_chunk_steps, --jit_compile)",
      f"- `common/run_table.sh --benchmark=uci --output_root={root} --datasets=\"boston_housing\" "
      "--seeds=\"1\" --methods=\"vogn\" -- --noise_chunk_steps=0 --nojit_compile` "
      "(code `1111111`, which had no --noise_chunk_steps, --jit_compile)",
      f"- `common/run_table.sh --benchmark=uci --output_root={root} --datasets=\"boston_housing\" "
      "--seeds=\"0 1\" --methods=\"vi\"` (code `abc`)",
      f"- `common/run_table.sh --benchmark=uci --output_root={root} --datasets=\"wine\" "
      "--seeds=\"0\" --methods=\"vogn\" -- --noise_chunk_steps=0 --nojit_compile` "
      "(code `abc`, which had no --noise_chunk_steps, --jit_compile)",
      f"- `common/run_table.sh --benchmark=uci --output_root={root}/eb --datasets=\"wine\" "
      "--seeds=\"0\" --methods=\"vogn\" -- --vogn_prior=empirical_bayes --vogn_prior_decay=0.0` "
      "(code `abc`, which had no --vogn_prior_decay)",
      f"- `python -m uci.main --dataset=wine --method=vi --seed=3 --hidden_units=20 "
      f"--output_dir={root}/probe` (code `fffffff` with uncommitted changes)",
      f"- `python -m uci.main --dataset=wine --method=vi --seed=0 --hidden_units=100 "
      f"--output_dir={root}/uci/wine/wide/vi/seed_0` (code `abc`)"]


def test_commands_come_in_the_order_their_code_was_written(tmp_path):
  """VOGN started at an older commit whose hash sorts last (finished after a newer one landed),
  its refinement at a newer one: run in the order given, the VOGN line must come first, or the
  refinement's line trains the shared VOGN checkpoint at code that draws other numbers. Catches
  lines ordered by hash (as they were), by the commit a run ended at rather than started at,
  and a commit the history lacks (a shallow clone) sorted before known ones."""
  from report import uci_table
  from uci.config import UciConfig
  root = tmp_path
  history = {"f" * 40: 0, "a" * 40: 1, "b" * 40: 2}
  _write_uci_record(root / "uci" / "wine" / "vogn" / "seed_0", "vogn", "wine", 0,
                    commit="b" * 40)
  record = root / "uci" / "wine" / "vogn" / "seed_0" / "results.json"
  record.write_text(json.dumps({**json.loads(record.read_text()),
                                "git_commit_at_start": "f" * 40 + "-dirty"}))
  _write_uci_record(root / "uci" / "wine" / "refined_vogn" / "seed_0", "refined_vogn", "wine",
                    0, commit="a" * 40)
  _write_uci_record(root / "uci" / "wine" / "vi" / "seed_0", "vi", "wine", 0, commit="0" * 40)
  runs = uci_table.load_runs(str(root))

  def methods(commands):
    return [command.split('--methods="')[1].split('"')[0] for command in commands]
  assert methods(remake_commands.reproduction_commands(runs, UciConfig, history)) == [
      "vogn", "refined_vogn", "vi"]
  assert methods(remake_commands.reproduction_commands(runs, UciConfig, {})) == [
      "vi", "refined_vogn", "vogn"]


def test_git_history_orders_parents_before_children_when_commit_times_tie(tmp_path):
  """Three commits in one second (as a rebase leaves them): their hashes and times say nothing
  of their order, parentage does. Catches ordering by commit time."""
  from common.results import git_commit, git_history_positions
  environment = {**os.environ, "GIT_COMMITTER_DATE": "2026-11-25T14:50:43+00:00",
                 "GIT_AUTHOR_DATE": "2026-11-25T14:50:43+00:00"}

  def git(*args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                   check=True, capture_output=True, env=environment)
  git("init", "-q")
  commits = []
  for number in range(3):
    (tmp_path / "code.py").write_text(f"x = {number}\n")
    git("add", ".")
    git("commit", "-q", "-m", f"commit {number}")
    commits.append(git_commit(str(tmp_path)))
  history = git_history_positions(str(tmp_path))
  assert [history[commit] for commit in commits] == [0, 1, 2]
  assert git_history_positions(str(tmp_path / "not_a_repository")) == {}


def test_each_command_remakes_its_runs_settings(tmp_path):
  """The flags of every generated command, parsed as the binary parses them, give a config whose
  settings match the run's record (`Config.differences` is empty), so rerunning the command over
  the results skips the finished runs. Catches a shown flag absl reads otherwise, a setting left
  out of the command, or a record of a setting that does nothing at its values (the decay under
  the fixed prior) refused as a mismatch; and that the command is valid and repeats the loop's
  compilation (`remake_settings`): the refined run made before --jit_compile_refinement
  compiled its refinement, where UCI's default no longer does, so only its recorded value gives
  the same ELBO_aux to the last digit."""
  from absl import flags
  from runner import config_flags
  from uci.config import UciConfig
  root = tmp_path
  records = {
      ("vi", 0): dict(noise_chunk_steps=None, jit_compile=None, vogn_prior_decay=None,
                      hidden_units=20),
      ("vogn", 0): dict(noise_chunk_steps=None, vogn_prior_decay=None, jit_compile=None),
      ("vogn", 1): dict(vogn_prior="empirical_bayes", vogn_prior_decay=None, learning_rate=0.02),
      ("refined_vi", 0): dict(jit_compile_refinement=None, prepare_refinement=None),
      ("svgd", 0): dict(split="standard_90_10", num_hidden_layers=2, particle_learning_rate=1e-3),
  }
  for (method, seed), changes in records.items():
    _write_uci_record(root / "uci" / "wine" / method / f"seed_{seed}", method, "wine", seed,
                      **changes)
  from report import uci_table
  commands = remake_commands.reproduction_commands(uci_table.load_runs(str(root)), UciConfig)
  assert len(commands) == len(records)
  assert [command for command in commands if '"refined_vi"' in command][0].endswith(
      '-- --jit_compile_refinement` (code `abc`, which had no --jit_compile_refinement)')
  for command in commands:
    method = command.split('--methods="')[1].split('"')[0]
    seed = int(command.split('--seeds="')[1].split('"')[0])
    shown = command.split("`")[1]
    extra = shown.split(" -- ")[1].split() if " -- " in shown else []
    flag_values = flags.FlagValues()
    config_flags.define_flags(UciConfig, flag_values)
    flag_values(["uci.main", f"--method={method}", "--dataset=wine", f"--seed={seed}", *extra])
    config = config_flags.config_from_flags(UciConfig, flag_values)
    record = json.loads((root / "uci" / "wine" / method / f"seed_{seed}" /
                         "results.json").read_text())
    config.validate()
    assert config.differences(record["flags"]) == [], command
    recorded = recorded_config(UciConfig, record["flags"], method=method, dataset="wine")
    assert {name: getattr(config, name) for name in recorded.remake_settings()} == {
        name: getattr(recorded, name) for name in recorded.remake_settings()}, command


def test_a_round_off_setting_is_shown_only_on_the_lines_of_methods_it_acts_on(tmp_path):
  """Runs recorded before --jit_compile_refinement and --jit_compile_ensemble existed compiled
  both (their `absent_means`, against UCI's defaults off). Catches a flag shown on lines of
  methods it does nothing for (`only_when`): the ensemble's on the VI and particle lines, where a
  reader would take it for part of how those runs were made."""
  from report import uci_table
  from uci.config import UciConfig
  for method in ("vi", "refined_vi", "deep_ensemble", "svgd"):
    _write_uci_record(tmp_path / "uci" / "wine" / method / "seed_0", method, "wine", 0,
                      jit_compile_refinement=None, jit_compile_ensemble=None)
  commands = remake_commands.reproduction_commands(uci_table.load_runs(str(tmp_path)), UciConfig,
                                                   {})
  extra_of = {command.split('--methods="')[1].split('"')[0]:
              command.split("`")[1].partition(" -- ")[2] for command in commands}
  assert extra_of == {"deep_ensemble": "--jit_compile_ensemble",
                      "refined_vi": "--jit_compile_refinement", "svgd vi": ""}


def test_the_commands_name_the_commits_a_shallow_clone_lacks_by_where_runs_started(
    tmp_path, monkeypatch):
  """The unknown-commit sentence must name the commits that put lines last: a run that started
  at a commit the history lacks and ended at one it holds comes last and is named; one that
  started at a held commit is not. Catches the sentence reading the end commit while the order
  reads the start (they differ for runs that outlive a commit)."""
  from report import uci_table
  from uci.config import UciConfig
  history = {"a" * 40: 0, "b" * 40: 1}
  monkeypatch.setattr(remake_commands, "git_history_positions", lambda: history)
  for method, start, end in (("vi", "c" * 40, "a" * 40), ("vogn", "b" * 40, "d" * 40)):
    _write_uci_record(tmp_path / "uci" / "wine" / method / "seed_0", method, "wine", 0,
                      commit=end)
    record = tmp_path / "uci" / "wine" / method / "seed_0" / "results.json"
    record.write_text(json.dumps({**json.loads(record.read_text()),
                                  "git_commit_at_start": start}))
  section = "\n".join(remake_commands.commands_section(
      uci_table.load_runs(str(tmp_path)), UciConfig, "python -m report.uci_related_table"))
  assert "does not hold ccccccc, where runs started" in section
  assert "ddddddd" not in section.split("## Commands")[1].split("\n- ")[0]
  assert section.index('--methods="vogn"') < section.index('--methods="vi"')


def test_an_ablations_uci_table_names_its_heading_and_the_command_that_wrote_it(tmp_path):
  """report.uci_related_table over an ablation's runs (other --related_dir, --heading): the file
  must say so, or it reads as the main table and its last command rewrites the wrong file."""
  from report import uci_related_table
  for method in ("vi", "refined_vi"):
    _write_uci_record(tmp_path / "uci" / "uci" / "wine" / method / "seed_0", method, "wine", 0)
  _write_uci_record(tmp_path / "ablation" / "uci" / "wine" / "svgd" / "seed_0", "svgd", "wine",
                    0, particle_epochs=100)
  for record in tmp_path.glob("**/results.json"):
    run = json.loads(record.read_text())
    run["metrics"]["num_test"] = 320
    record.write_text(json.dumps(run))
  text = uci_related_table.write_table(
      str(tmp_path / "uci" / "uci"), str(tmp_path / "ablation" / "uci"), str(tmp_path / "out"),
      heading="SVGD at equal compute",
      table_command="python -m report.uci_related_table --heading=X")
  assert text.startswith("# SVGD at equal compute\n")
  assert "Then `python -m report.uci_related_table --heading=X` writes this file." in text
  assert "--particle_epochs=100" in text
