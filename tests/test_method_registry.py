"""The method registry: methods found by name, each binary's flags scoped to the methods it offers
(those whose network kinds its builders supply, a new kind needing no edit outside its method and
the benchmarks that offer it), committed runs' settings still valid, and run_table.sh's jobs from
the registry."""
import dataclasses
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from runner.config import MethodConfig
from runner import config_flags
from common.config import Config, UsageError, recorded_config, setting
from image.config import ImageConfig
from methods import network_kinds, registry
from methods.registry import Method, MethodRun, Networks
from methods.vi import ViConfig
from tests.usage_runs import run_commands
from resnet.config import ResNetConfig
from uci.config import UciConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = {"uci": UciConfig, "image": ImageConfig, "resnet": ResNetConfig}
ENVIRONMENT = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _method_fields(config_class: type) -> set[str]:
  """The fields of `config_class` that a method's settings class declares."""
  return {field.name for field in dataclasses.fields(config_class)
          if config_flags.declaring_module(config_class, field.name).startswith("methods.")}


def test_every_method_is_registered_once_with_its_settings_and_needs():
  names = registry.names()
  assert names == ("vi", "refined_vi", "vi_equal_compute", "mnf", "deep_ensemble", "vogn",
                   "refined_vogn", "svgd", "fsvgd")
  for name in names:
    method = registry.method(name)
    assert method.name == name and method.title
    assert issubclass(method.config, Config) and dataclasses.is_dataclass(method.config)
    assert method.needs and all(isinstance(kind, str) for kind in method.needs)
    assert callable(method.train)
  assert registry.names_where(lambda method: method.refines) == ("refined_vi", "refined_vogn")
  with pytest.raises(ValueError, match="unknown method 'laplace'; allowed: vi, refined_vi"):
    registry.method("laplace")


def test_a_benchmark_offers_the_methods_its_networks_supply():
  assert UciConfig.__dataclass_fields__["method"].metadata["choices"] == registry.names()
  assert ImageConfig.__dataclass_fields__["method"].metadata["choices"] == (
      "vi", "refined_vi", "vi_equal_compute", "mnf", "deep_ensemble", "vogn", "refined_vogn")
  # ResNet-20 has no MNF version, and its L2 penalty on point estimates rules VOGN out.
  assert ResNetConfig.__dataclass_fields__["method"].metadata["choices"] == (
      "vi", "refined_vi", "vi_equal_compute", "deep_ensemble")


def test_a_benchmarks_networks_supply_exactly_the_methods_its_binary_offers():
  """Catches: a binary's config offering a method whose builder its networks lack (the run fails
  after data loading), or networks with a builder whose methods the binary never offers."""
  from image.lenet import lenet5_networks
  from resnet.networks import resnet_networks
  from uci.networks import uci_networks
  for config_class, networks in ((UciConfig, uci_networks(UciConfig())),
                                 (ImageConfig, lenet5_networks(ImageConfig(), 10)),
                                 (ResNetConfig, resnet_networks(ResNetConfig(), 10))):
    offered = config_class.__dataclass_fields__["method"].metadata["choices"]
    assert registry.methods_for(networks.kinds(),
                                penalty=networks.penalty is not None) == offered, config_class
  with pytest.raises(ValueError, match="supplies no 'mnf' networks; it supplies: mean_field, "
                     "ensemble"):
    resnet_networks(ResNetConfig(), 10).builder(network_kinds.MNF)


def test_a_misspelt_network_kind_is_refused():
  with pytest.raises(ValueError, match=r"supplies \['mean_feild'\], which no method needs; the "
                     "methods need: ensemble, mean_field, mnf, particles"):
    registry.methods_for(("mean_feild", network_kinds.ENSEMBLE))
  with pytest.raises(ValueError, match="method laplace: needs must be a tuple"):
    Method(name="laplace", title="Laplace", config=Config, needs="laplace_net",
           train=lambda run: None, order=10, summary="a bare string of a kind")
  with pytest.raises(ValueError, match="kind 'mnf' needs a name and a callable builder"):
    Networks(builders={network_kinds.MNF: None})


LAPLACE_NET = "laplace_net"  # a kind no module of the package names: the throwaway method's own


@dataclasses.dataclass
class _LaplaceConfig(Config):
  laplace_prior_precision: float = setting(1.0, "laplace: prior precision.", minimum=0)


def test_a_method_with_an_architecture_of_its_own_needs_no_other_module_edited(tmp_path):
  """A method needing a new kind of network ("laplace_net") is offered by a benchmark whose
  Networks supply that builder and by no other, and trains on it through the one dispatch: the
  registry, the other methods and the benchmarks without it stay as they are."""
  from runner.dispatch import train_method

  def train(run):
    model = run.networks.builder(LAPLACE_NET)()
    return MethodRun(sample_outputs=model, models=[model], metrics={}, timings={})

  laplace = Method(name="laplace", title="Laplace", config=_LaplaceConfig, needs=(LAPLACE_NET,),
                   train=train, order=10, summary="a Laplace approximation (throwaway)")
  mean_field = {network_kinds.MEAN_FIELD: lambda num_members: "mean-field network"}
  without = Networks(builders=mean_field)
  offering = Networks(builders={**mean_field, LAPLACE_NET: lambda: "laplace network"})
  mean_field_methods = ("vi", "refined_vi", "vi_equal_compute", "vogn", "refined_vogn")
  assert registry.methods_for(without.kinds()) == mean_field_methods
  with pytest.raises(ValueError, match="'laplace_net'], which no method needs"):
    registry.methods_for(offering.kinds())
  inputs, labels = np.zeros([4, 1]), np.zeros([4, 1])
  with registry.extended_with(laplace):
    assert registry.methods_for(offering.kinds()) == mean_field_methods + ("laplace",)
    assert registry.methods_for(without.kinds()) == mean_field_methods
    assert registry.methods_for(offering.kinds(), penalty=True) == ("vi", "refined_vi",
                                                                     "vi_equal_compute", "laplace")
    assert _LaplaceConfig in registry.configs_of(("vi", "laplace"))
    with pytest.raises(ValueError, match="laplace needs the benchmark's laplace_net networks; "
                       "it supplies: mean_field"):
      train_method(MethodConfig(method="laplace"), without, inputs, labels, None, str(tmp_path))
    run = train_method(MethodConfig(method="laplace"), offering, inputs, labels, None,
                       str(tmp_path))
    assert run.models == ["laplace network"]
  assert "laplace" not in registry.names()
  assert registry.methods_for(without.kinds()) == mean_field_methods
  with pytest.raises(ValueError, match="two methods are called 'vi'"):
    with registry.extended_with(dataclasses.replace(laplace, name="vi")):
      pass
  assert registry.method("vi").needs == (network_kinds.MEAN_FIELD,)


@pytest.mark.parametrize("binary", sorted(BINARIES))
def test_a_binary_has_the_settings_of_the_methods_it_offers_and_no_others(binary):
  """Catches: a binary inheriting every method's flags (ResNet-20 had 21 that could never act:
  vogn_*, particle_*, fsvgd_*, mnf_steps)."""
  config_class = BINARIES[binary]
  offered = config_class.__dataclass_fields__["method"].metadata["choices"]
  expected = set()
  for name in offered:
    expected |= {field.name for field in dataclasses.fields(registry.method(name).config)
                 if field.name not in {f.name for f in dataclasses.fields(Config)}}
  assert _method_fields(config_class) == expected
  never_acting = {"mnf_steps", "vogn_momentum", "num_particles", "fsvgd_prior_draws"}
  if binary == "resnet":
    assert not never_acting & set(config_class.__dataclass_fields__)
  if binary == "uci":
    assert never_acting <= set(config_class.__dataclass_fields__)


def test_a_methods_checks_run_in_every_binary_that_offers_it():
  """Catches: a method's own check left out of the chain of checks (a settings class whose
  check or check_replicas does not call super(), or a composed config that skips it)."""
  with pytest.raises(UsageError, match="--fsvgd_extra_batch=1 cannot hold"):
    UciConfig(method="fsvgd", fsvgd_prior_points=4, fsvgd_extra_batch=1).validate()
  UciConfig(method="svgd", fsvgd_prior_points=4, fsvgd_extra_batch=1).validate()  # not fsvgd's
  with pytest.raises(UsageError, match="--vi_optimizer=misso keeps its surrogates"):
    UciConfig(method="vi", vi_optimizer="misso").check_replicas(2)
  with pytest.raises(UsageError, match="--method=svgd couples every particle"):
    UciConfig(method="svgd").check_replicas(2)
  with pytest.raises(UsageError, match="--refit_deterministic: this benchmark"):
    UciConfig(method="refined_vi", refit_deterministic=True).validate()
  ResNetConfig(method="refined_vi", refit_deterministic=True).validate()
  with pytest.raises(UsageError, match="float32"):
    ResNetConfig(method="refined_vi", num_auxiliary=200, variance_ratio=0.9).validate()
  ResNetConfig(method="vi", num_auxiliary=200, variance_ratio=0.9).validate()  # no refinement
  # The device's check still runs after the methods'.
  with pytest.raises(UsageError, match="--num_cores=1 but the strategy found 2 replicas"):
    UciConfig(method="vi").check_replicas(2)


def test_the_method_decides_the_mean_field_prior():
  assert UciConfig(method="vi", empirical_bayes_prior=False).mean_field_prior() == (1.0, False)
  assert UciConfig(method="refined_vi").mean_field_prior() == (1.0, True)
  assert UciConfig(method="refined_vogn",
                   vogn_prior_precision=4.0).mean_field_prior() == (0.5, False)


def _committed_results(benchmark: str) -> list[str]:
  return sorted(glob.glob(os.path.join(REPO, "results", "**", "results.json"), recursive=True))


def test_every_committed_run_is_still_a_run_of_these_settings():
  """Catches: a method's setting lost, renamed or given another default or meaning by the split
  of the settings (a rerun of a committed run would then be refused as made with other
  settings, or silently differ): every committed results.json of a benchmark binary, read back
  as a config, compares equal to its own record."""
  checked = 0
  for path in _committed_results("all"):
    with open(path) as handle:
      record = json.load(handle)
    config_class = BINARIES.get(record.get("benchmark"))
    if config_class is None:
      continue
    flags = record.get("flags", {})
    config = recorded_config(config_class, flags, method=record["method"])
    assert config.differences(flags) == [], path
    # What a rerun of it takes on the command line is still a flag of the binary.
    assert set(config.identity()) <= set(config_class.__dataclass_fields__), path
    checked += 1
  assert checked > 100


def _run(*arguments: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *arguments], cwd=REPO, env=ENVIRONMENT,
                        capture_output=True, text=True, timeout=120)


def test_helpfull_groups_each_methods_flags_under_its_module_and_help_shows_the_rest(tmp_path):
  full, short, unknown = run_commands(
      "resnet.main", [["--helpfull"], ["--help"],
                      ["--vogn_momentum=0.5", f"--output_dir={tmp_path / 'unused'}"]],
      environment=ENVIRONMENT)
  assert full.returncode == 0, full.stderr
  assert "methods.refined_vi:" in full.stdout and "--num_auxiliary" in full.stdout
  assert "methods.deep_ensemble:" in full.stdout and "--ensemble_members" in full.stdout
  assert "--vogn_momentum" not in full.stdout and "--num_particles" not in full.stdout
  assert short.returncode == 0 and "--variational" in short.stdout
  assert "--num_auxiliary" not in short.stdout and "--helpfull" in short.stdout
  assert unknown.returncode == 2 and "vogn_momentum" in unknown.stderr


def test_the_registry_groups_a_tables_methods_into_jobs():
  assert registry.training_jobs(["deep_ensemble", "vi_equal_compute", "vi", "mnf",
                                 "refined_vogn"]) == [["vi", "vi_equal_compute"], ["mnf"],
                                                      ["deep_ensemble"], ["refined_vogn"]]
  listed, refused = run_commands(
      "methods.registry", [["--jobs=refined_vi svgd vogn refined_vogn vi"], ["--jobs=vi laplace"]],
      environment=ENVIRONMENT)
  assert listed.returncode == 0 and listed.stdout.splitlines() == [
      "vi refined_vi", "vogn refined_vogn", "svgd"]
  assert refused.returncode == 2 and refused.stdout == ""
  assert refused.stderr.strip().startswith("error: unknown method 'laplace'; allowed: vi,")


def test_run_table_asks_the_registry_for_its_methods(tmp_path):
  """Catches: run_table.sh keeping a shell list of methods (a new method refused, or a typo
  running nothing)."""
  result = subprocess.run(
      ["bash", "common/run_table.sh", "--benchmark=uci", "--datasets=yacht_hydrodynamics",
       f"--output_root={tmp_path}", "--methods=vi laplace"], cwd=REPO, env=ENVIRONMENT,
      capture_output=True, text=True, timeout=120)
  assert result.returncode == 2
  assert "unknown method 'laplace'" in result.stderr and not list(tmp_path.iterdir())


def test_a_methods_settings_class_is_free_of_tensorflow():
  """The binaries build their flags from the methods' settings before TensorFlow loads."""
  probe = _run("-c", "import sys, methods.registry as r; r.names(); import uci.config, "
               "resnet.config, image.config; print('tensorflow' in sys.modules)")
  assert probe.returncode == 0 and probe.stdout.strip() == "False", probe.stderr


def test_the_core_settings_are_every_methods():
  core = {field.name for field in dataclasses.fields(MethodConfig)}
  assert {"method", "seed", "batch_size", "learning_rate", "num_samples"} <= core
  assert not core & {field.name for field in dataclasses.fields(ViConfig)} - {
      field.name for field in dataclasses.fields(Config)}
