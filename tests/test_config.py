"""Settings declared once.

Checks, flags, rerun identity, checkpoint settings records, stale temporaries.
"""
import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

from runner.checkpoint_settings import SETTINGS_FILENAME, claim_checkpoint_dir
from runner.output_directory import remove_stale_temporaries
from runner import cli, config_flags
from common.config import (NOTHING, RESULTS, Config, UsageError, absent_values,
                           describe_differences, differing_settings, recorded_config,
                           setting, with_default)
from image.config import ImageConfig
from toy.multimodal import ToyConfig
from uci.config import UciConfig


@dataclasses.dataclass
class Example(Config):
  name: str = setting("a", "A name.", choices=("a", "b"))
  count: int = setting(1, "A count.", minimum=1)
  rate: float = setting(0.5, "A rate.", above=0, below=1, shapes=("trainer",))
  sizes: tuple[int, ...] = setting((1, 2), "Sizes.", minimum=1)
  place: str = setting("x", "Where.", shapes=NOTHING)
  report: int = setting(3, "Report.", shapes=RESULTS)


@dataclasses.dataclass
class Derived(Example):
  count: int = with_default(Example, "count", 7)


@pytest.mark.parametrize("values,message", [
    (dict(name="c"), "name='c' is not allowed; allowed: one of a, b"),
    (dict(count=0), "count=0 is out of range; allowed: >= 1"),
    (dict(count=1.5), "count=1.5 must be an integer"),
    (dict(count=True), "count=True must be an integer"),
    (dict(rate=1.0), "rate=1.0 is out of range; allowed: > 0 and < 1"),
    (dict(rate=math.inf), "rate=inf must be a finite number"),
    (dict(rate=math.nan), "rate=nan must be a finite number"),
    (dict(sizes=(1, 0)), "sizes=0 is out of range; allowed: >= 1"),
    (dict(sizes=()), "sizes=() must list at least one value"),
])
def test_every_bad_value_is_one_usage_error_naming_it(values, message):
  with pytest.raises(UsageError) as raised:
    Example(**values).validate()
  assert str(raised.value) == message


def test_a_data_dir_that_is_not_a_folder_is_refused_before_any_work(tmp_path):
  """Mutation: without the check, UCI tried to download into the missing folder (exit 1 after
  TensorFlow loaded); every benchmark's data_dir now fails the same way at flag-checking time."""
  for config_class in (UciConfig, ImageConfig):
    config_class(data_dir=str(tmp_path)).validate()
    with pytest.raises(UsageError) as raised:
      config_class(data_dir=str(tmp_path / "missing")).validate()
    assert str(raised.value) == (f"data_dir={tmp_path / 'missing'} is not a folder; "
                                 "allowed: an existing folder, or unset")


def test_with_default_keeps_the_declaration():
  assert Derived().count == 7
  with pytest.raises(UsageError, match="count=0 is out of range; allowed: >= 1"):
    Derived(count=0).validate()


@dataclasses.dataclass
class Narrowed(Example):
  report: int = with_default(Example, "report", only_when=("name", ("b", "c")))
  place: str = with_default(Example, "place", only_when=("name", "b"))


def test_with_default_can_narrow_where_a_setting_acts_keeping_its_default():
  """`only_when` given to with_default, with one value or several: the setting keeps its
  declaration and default, and counts (in the identity, and so in reruns and commands) only at
  those values. Catches a tuple of values compared as one value, or the default lost."""
  assert Narrowed().report == 3 and Narrowed().place == "x"
  assert "report" not in Narrowed(name="a").identity()
  assert "report" in Narrowed(name="b").identity()
  assert Narrowed(name="b").identity()["report"] == 3
  field = {field.name: field for field in dataclasses.fields(Narrowed)}["report"]
  assert field.metadata["help"] == "Report." and field.metadata["shapes"] == RESULTS


def test_identity_selects_what_shapes_each_checkpoint_and_the_results():
  config = Example()
  assert set(config.identity()) == {"name", "count", "rate", "sizes", "report"}
  assert set(config.identity("trainer")) == {"name", "count", "rate", "sizes"}
  assert set(config.identity("other")) == {"name", "count", "sizes"}
  recorded = {**config.as_dict(), "place": "elsewhere", "report": 4}
  assert config.differences(recorded) == ["report"]
  assert config.differences(recorded, "trainer") == []
  assert config.differences({"count": 1}) == []          # absent settings count as their defaults


@dataclasses.dataclass
class Versioned(Config):
  chunk: int = setting(0, "Declared when runs lacked it.", minimum=0, absent_means=0)


@dataclasses.dataclass
class NewDefault(Versioned):
  chunk: int = with_default(Versioned, "chunk", 100)


def test_a_record_without_a_setting_whose_default_changed_is_not_taken_for_the_new_default():
  """The bug: UCI's --noise_chunk_steps default went from 0 to 100, and a results.json made before
  the flag existed (no such key) counted as made with 100, so a rerun silently kept numbers
  drawn inside each step. A record lacking it means what runs did then."""
  assert NewDefault().differences({}) == ["chunk"]
  assert NewDefault().differences({"chunk": 100}) == []
  assert NewDefault(chunk=0).differences({}) == []
  assert "--chunk=100 (recorded: 0)" in describe_differences(NewDefault(), {}, ["chunk"])


@dataclasses.dataclass
class ChunkedExample(Example):
  chunk: int = setting(100, "Declared after runs were recorded.", minimum=0, absent_means=0)


def test_a_record_is_read_as_the_config_it_describes():
  """The bug it catches: reading a record's missing setting as today's default (here chunk=100),
  so a listed or remade run claims settings it never had; and lists left as lists, so a
  recorded tuple setting compared unequal to the same config's own value."""
  recorded = recorded_config(ChunkedExample, {"sizes": [3, 4], "count": 2})
  assert recorded == ChunkedExample(chunk=0, sizes=(3, 4), count=2)
  assert recorded.differences({"sizes": [3, 4], "count": 2}) == []
  assert recorded_config(ChunkedExample, {"chunk": 100}) == ChunkedExample()
  assert recorded_config(ChunkedExample, {}, name="b").name == "b"


def test_every_binary_with_device_flags_runs_under_them():
  """A binary whose config declares hardware or loop flags must wrap its train_and_evaluate in
  cli.runs_under_its_device_settings, or a script calling it runs on other hardware or another
  loop than its results.json records (the bugs the decorator fixed); cli.main refuses one that
  does not, before any flag is read."""
  import bandits.main
  import bandits.sample_quality
  import image.main
  import resnet.main
  import uci.main
  for module in (uci.main, image.main, resnet.main, bandits.main, bandits.sample_quality):
    assert module.train_and_evaluate.runs_under_device_settings, module.__name__
  with pytest.raises(TypeError, match="wrap train_and_evaluate in cli.runs_under_its_device"):
    cli.main(UciConfig, uci.main.train_and_evaluate.__wrapped__)


# What `python -m <binary>` imports before its flags are read: its module, and its config class.
_PROBE = """
import importlib, sys
from absl import flags
from runner import config_flags
importlib.import_module({binary!r})
config_class = getattr(importlib.import_module({config_module!r}), {config_class!r})
config_flags.define_flags(config_class)
flags.FLAGS([{binary!r}, "--output_dir=unused"])
config_flags.config_from_flags(config_class).validate()
print("tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("binary,config_module,config_class", [
    ("uci.main", "uci.config", "UciConfig"), ("image.main", "image.config", "ImageConfig"),
    ("resnet.main", "resnet.config", "ResNetConfig"),
    ("bandits.main", "bandits.config", "BanditConfig"),
    ("bandits.sample_quality", "bandits.sample_quality", "SampleQualityConfig"),
    ("toy.multimodal", "toy.multimodal", "ToyConfig"),
    ("toy.eight_schools", "toy.eight_schools", "EightSchoolsConfig")])
def test_every_binary_checks_its_flags_before_tensorflow_loads(binary, config_module,
                                                                config_class):
  """Catches a binary that imports TensorFlow with its module (the toy binaries did): its
  --help then takes seconds, and a bad flag's one line comes after TensorFlow's start-up noise."""
  code = _PROBE.format(binary=binary, config_module=config_module, config_class=config_class)
  completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             timeout=120)
  assert completed.returncode == 0, completed.stderr[-2000:]
  assert completed.stdout.strip() == "False"


def test_shipped_configs_are_valid_and_fully_documented():
  for config_class in (UciConfig, ImageConfig, ToyConfig):
    config_class().validate()
    for field in dataclasses.fields(config_class):
      assert len(field.metadata.get("help", "")) > 5, (config_class.__name__, field.name)


def test_vi_checkpoints_ignore_refinement_and_other_methods_settings():
  """vi, refined_vi and vi_equal_compute runs share one VI checkpoint: only what shapes it counts.

  Mutation: counting method or num_samples in the VI identity breaks that sharing (the runs would
  refuse each other's checkpoint) and fails here; leaving seed or dataset out fails too."""
  base = UciConfig()
  other = UciConfig(method="vi", num_samples=3, steps_per_auxiliary=7, ensemble_members=2,
                    mnf_steps=5)
  assert other.differences(base.identity("vi"), "vi") == []
  for name, value in (("seed", 1), ("dataset", "yacht_hydrodynamics"), ("split", "standard_90_10"),
                      ("hidden_units", 8), ("batch_size", 32), ("learning_rate", 0.01)):
    assert UciConfig(**{name: value}).differences(base.identity("vi"), "vi") == [name]


def test_checkpoint_dir_records_its_settings_and_refuses_others(tmp_path):
  directory = str(tmp_path / "vi")
  claim_checkpoint_dir(directory, {"seed": 0, "sizes": (1, 2)}, replace_mismatched=False,
                       absent_values={})
  assert json.loads((tmp_path / "vi" / SETTINGS_FILENAME).read_text()) == {
      "seed": 0,
      "sizes": [1, 2]
  }
  (tmp_path / "vi" / "ckpt-1.index").write_text("")
  claim_checkpoint_dir(directory, {
      "seed": 0,
      "sizes": [1, 2]
  }, replace_mismatched=False, absent_values={})  # same: kept
  with pytest.raises(UsageError, match=r"--seed=1 \(checkpoint: 0\)"):
    claim_checkpoint_dir(directory, {"seed": 1, "sizes": [1, 2]}, replace_mismatched=False,
                         absent_values={})
  claim_checkpoint_dir(directory, {"seed": 1, "sizes": [1, 2]}, replace_mismatched=True,
                       absent_values={})
  assert os.listdir(directory) == [SETTINGS_FILENAME]


def test_a_checkpoint_without_a_settings_record_is_refused(tmp_path):
  (tmp_path / "old").mkdir()
  (tmp_path / "old" / "ckpt-5.index").write_text("")
  with pytest.raises(UsageError, match="records no settings"):
    claim_checkpoint_dir(str(tmp_path / "old"), {"seed": 0}, replace_mismatched=False,
                         absent_values={})


def test_a_settings_record_being_written_is_not_a_checkpoint_without_one(tmp_path):
  """A --multi_worker run's other workers claim the checkpoint directory while the chief may be
  writing its settings record through a temporary file. Catches that file counted as a checkpoint
  without a record: worker 1 refused the run ("records no settings", exit 2) and worker 0 then
  aborted ("stopped sending heartbeats"): the 2-worker ResNet-20 test's failure in a quiet suite
  run, whose signature CI's failure had."""
  (tmp_path / "vi").mkdir()
  (tmp_path / "vi" / ".tmp-k2x9.json").write_text('{"seed"')
  claim_checkpoint_dir(str(tmp_path / "vi"), {"seed": 0}, replace_mismatched=False,
                       absent_values={})
  (tmp_path / "vi" / "ckpt-5.index").write_text("")
  (tmp_path / "vi" / SETTINGS_FILENAME).unlink()
  with pytest.raises(UsageError, match="records no settings"):
    claim_checkpoint_dir(str(tmp_path / "vi"), {"seed": 0}, replace_mismatched=False,
                         absent_values={})


@pytest.mark.parametrize("task_index,removed", [(0, True), (1, False)])
def test_only_a_multi_worker_runs_chief_removes_stale_temporaries(tmp_path, monkeypatch,
                                                                   task_index, removed):
  """The workers of a --multi_worker run start at different times; one that removed the
  "stale" temporaries would delete the file the chief is writing (its os.replace then fails).
  Worker 0, the chief without a chief task, removes them; worker 1 leaves them."""
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": ["localhost:1", "localhost:2"]},
      "task": {"type": "worker", "index": task_index}}))
  (tmp_path / ".tmp-abc.json").write_text("half")
  assert remove_stale_temporaries(str(tmp_path), multi_worker=True) == (
      [str(tmp_path / ".tmp-abc.json")] if removed else [])
  assert (tmp_path / ".tmp-abc.json").exists() != removed


def test_stale_temporaries_of_a_killed_run_are_removed(tmp_path):
  (tmp_path / "checkpoints" / "vi").mkdir(parents=True)
  stale = [tmp_path / ".tmp-abc.json", tmp_path / "checkpoints" / "vi" / "xyz.npz.tmp"]
  for path in stale:
    path.write_text("half")
  (tmp_path / "results.json").write_text("{}")
  assert sorted(remove_stale_temporaries(str(tmp_path))) == sorted(str(path) for path in stale)
  assert sorted(os.listdir(tmp_path)) == ["checkpoints", "results.json"]


def test_progress_lines_say_where_a_run_is_and_when_it_ends():
  from auxiliary_sampling.progress import ProgressLog, format_duration
  assert [format_duration(s) for s in (12.3, 185, 3725)] == ["12s", "3m05s", "1h02m"]
  progress = ProgressLog("vi", total=30_000, start_step=10_000)
  progress.started = progress.previous_time = 0.0
  assert progress.line(11_000, -9020.4, now=100.0) == (
      "vi: step 11,000/30,000 (37%), 10.0 steps/s, ELBO -9,020, elapsed 1m40s, ETA 31m40s")
  assert "20.0 steps/s" in progress.line(13_000, now=200.0)   # the rate of the latest interval


def test_evaluation_progress_is_logged_at_intervals_and_at_the_end(monkeypatch):
  from auxiliary_sampling import progress as progress_module
  lines = []
  monkeypatch.setattr(progress_module.logging, "info", lines.append)
  clock = iter([0.0, 1.0, 2.0, 40.0, 40.0, 41.0, 41.0])
  monkeypatch.setattr(progress_module.time, "perf_counter", lambda: next(clock))
  progress = progress_module.ProgressLog("evaluation (batches)", total=4)
  for batch in range(1, 5):
    progress.log_every(batch, seconds=30.0)
  # Batches 1 and 2 (t = 1, 2 s) are too soon; batch 3 (t = 40 s) and the last batch are logged.
  assert [line.split(",")[0] for line in lines] == [
      "evaluation (batches): step 3/4 (75%)", "evaluation (batches): step 4/4 (100%)"]


def test_flags_carry_declared_defaults_so_resolved_values_follow_the_method():
  """ImageConfig resolves pixel_scaling "by_method" per method when it is built.

  Mutation: taking flag defaults from a default instance (method refined_vi) fixes the flag at
  "standardise", and a deep_ensemble run from the command line silently standardises its pixels
  (a bug this test was written after)."""
  from absl import flags
  values = flags.FlagValues()
  config_flags.define_flags(ImageConfig, values)
  assert values["pixel_scaling"].default == "by_method"
  values(["image.main", "--method=deep_ensemble"])
  assert config_flags.config_from_flags(ImageConfig, values).pixel_scaling == "unit_interval"
  values(["image.main", "--method=vi", "--num_auxiliary=3"])
  config = config_flags.config_from_flags(ImageConfig, values)
  assert config.pixel_scaling == "standardise" and config.num_auxiliary == 3


def test_replacing_a_mismatched_checkpoint_deletes_only_checkpoint_files(tmp_path):
  """Mutation: discarding the whole folder (rmtree) would delete a user's other files when
  --vi_checkpoint_dir points at a folder that holds more than checkpoints."""
  folder = tmp_path / "mine"
  claim_checkpoint_dir(str(folder), {"seed": 0}, replace_mismatched=False, absent_values={})
  for name in ("checkpoint", "ckpt-5.index", "ckpt-5.data-00000-of-00001", "trace.npz",
               "notes.txt"):
    (folder / name).write_text("x")
  claim_checkpoint_dir(str(folder), {"seed": 1}, replace_mismatched=True, absent_values={})
  assert sorted(os.listdir(folder)) == ["notes.txt", SETTINGS_FILENAME]
  assert json.loads((folder / SETTINGS_FILENAME).read_text()) == {"seed": 1}


def test_particle_methods_refuse_more_than_one_replica_and_follow_the_fpovi_protocol():
  """The kernel couples every particle, so they share one device; the default batch and epochs
  follow the f-POVI paper's UCI protocol (batch 100 x 500 epochs; 1000 x 3000 past 900)."""
  with pytest.raises(UsageError, match="--method=fsvgd couples every particle on one device"):
    UciConfig(method="fsvgd", num_cores=2).check_replicas(2)
  UciConfig(method="fsvgd").check_replicas(1)
  assert UciConfig(method="svgd").particle_batch_and_steps(455) == (100, 500 * 5)
  assert UciConfig(method="svgd").particle_batch_and_steps(901) == (1000, 3000 * 1)
  assert UciConfig(method="svgd", particle_batch_size=32,
                   particle_epochs=7).particle_batch_and_steps(100) == (32, 7 * 4)


def test_a_setting_added_after_a_checkpoint_counts_as_what_older_runs_did(tmp_path):
  """Catches a new setting orphaning every existing checkpoint: a record without it must match
  a request at its absent value (what runs did before it existed) and refuse any other."""
  directory = str(tmp_path / "vi")
  claim_checkpoint_dir(directory, {"seed": 0}, replace_mismatched=False, absent_values={})
  (tmp_path / "vi" / "ckpt-1.index").write_text("")
  absent = {"seed": 0, "input_scaling": "unit"}
  claim_checkpoint_dir(directory, {"seed": 0, "input_scaling": "unit"}, replace_mismatched=False,
                       absent_values=absent)
  assert (tmp_path / "vi" / "ckpt-1.index").exists()
  with pytest.raises(UsageError, match=r"--input_scaling=unit_over_sqrt_dim \(checkpoint: unit\)"):
    claim_checkpoint_dir(directory, {"seed": 0, "input_scaling": "unit_over_sqrt_dim"},
                         replace_mismatched=False, absent_values=absent)
  with pytest.raises(UsageError, match=r"--input_scaling=unit \(checkpoint: not recorded\)"):
    claim_checkpoint_dir(directory, {"seed": 0, "input_scaling": "unit"}, replace_mismatched=False,
                         absent_values={})


def test_results_and_checkpoint_records_are_compared_by_one_rule(tmp_path):
  """A results.json's flags and a checkpoint's settings.json are judged alike
  (`differing_settings`): absent settings at their absent value, tuples equal to the lists JSON
  gives back, settings recorded but no longer requested (removed) ignored. Catches the two checks
  drifting apart again, as when only one of them knew the absent values."""
  config = NewDefault(chunk=0)
  record = {"removed_setting": 3}
  assert config.differences(record) == []
  directory = str(tmp_path / "state")
  claim_checkpoint_dir(directory, record, replace_mismatched=False, absent_values={})
  (tmp_path / "state" / "ckpt-1.index").write_text("")
  claim_checkpoint_dir(directory, {"chunk": 0}, replace_mismatched=False,
                       absent_values=absent_values(config))
  assert (tmp_path / "state" / "ckpt-1.index").exists()
  assert differing_settings({"sizes": (1, 2), "chunk": 100}, {"sizes": [1, 2]}, {"chunk": 0}) == [
      "chunk"]
  # Neither recorded nor with an absent value: different, whatever the requested value is.
  assert differing_settings({"agent": "not recorded"}, {}, {}) == ["agent"]


def test_the_initial_posterior_scale_counts_only_for_the_mean_field_methods():
  """LeNet-5's and ResNet-20's MNF and ensemble never read the mean-field posterior's initial
  scale: a rerun of theirs must not be refused over it, nor their commands carry it."""
  from image.config import ImageConfig
  from resnet.config import ResNetConfig
  for config_class in (ImageConfig, ResNetConfig):
    for method in ("mnf", "deep_ensemble"):
      assert "initial_untransformed_posterior_scale" not in config_class(method=method).identity()
    for method in ("vi", "refined_vi", "vi_equal_compute", "vogn", "refined_vogn"):
      assert "initial_untransformed_posterior_scale" in config_class(method=method).identity()
