"""The method registry: every method the benchmarks compare, found by name.

A method is one module of this package that defines `METHOD`, a `Method`: its
name, its own settings (a `common.config.Config` dataclass whose fields become
its flags), what it needs from a benchmark (which of `Networks`' builders), and
`train`, which trains it and returns the `MethodRun` it predicts with. The
registry finds the modules itself, so adding a method is adding its module;
the binaries, `common/run_table.sh` (`python -m methods.registry`) and the
benchmarks' configs ask it which methods exist and which settings they take.

Nothing here imports TensorFlow: the binaries build their flags from the
settings before it loads, and a method's `train` imports what it trains with.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
  import tensorflow as tf
  from auxiliary_sampling.refinement_result import RefinementResult

# Trained state a setting can shape (`common.config.setting(shapes=...)`), by checkpoint: the
# mean-field model of VI, its further training in vi_equal_compute, MNF's, the ensemble's,
# VOGN's mean-field model and the particles.
VI, EXTRA_VI, MNF, ENSEMBLE, VOGN, PARTICLES = ("vi", "extra_vi", "mnf", "deep_ensemble", "vogn",
                                                "particles")
# What a method may need from a benchmark: the fields of `Networks` that build networks.
NETWORK_KINDS = ("mean_field", "mnf", "ensemble", "particles")


@dataclasses.dataclass
class Networks:
  """A benchmark's architectures, one builder per kind a method may need (`Method.needs`)."""

  mean_field: Callable[[Optional[int]], "tf.Module"]  # num_members (None: no member axis) -> VI
  mnf: Optional[Callable[[], "tf.Module"]]           # -> MNF network (None: no MNF version)
  ensemble: Callable[[int], "tf.Module"]             # num_members -> members on a member axis
  # Penalty of a network's point-estimated weights per example (ResNet-20's L2), or None.
  penalty: Optional[Callable[[Any], "tf.Tensor"]] = None
  # num_particles -> point-weight networks on a member axis (methods.trainers.particles), or None.
  particles: Optional[Callable[[int], "tf.Module"]] = None


@dataclasses.dataclass
class MethodRun:
  """A trained method: the networks it predicts with, metrics so far, timings."""

  sample_outputs: Callable[[Any], "tf.Tensor"]  # inputs -> [M, batch, ...] outputs of M samples
  models: list                                   # the trained networks (for benchmark metrics)
  metrics: dict
  timings: dict
  refinement: Optional["RefinementResult"] = None  # the refining methods only


@dataclasses.dataclass
class TrainingInputs:
  """What a method's `train` gets: the run's settings, the benchmark's networks and data.

  `checkpoint_dir(trainer)` says where a trainer's checkpoints go (claimed for the run's
  settings); `input_transform` augments every training batch (None: none).
  """

  config: Any                       # the binary's config: its benchmark's and methods' settings
  networks: Networks
  inputs: Any
  labels: Any
  log_likelihood_fn: Callable
  output_dir: str
  checkpoint_dir: Callable[[str], str]
  input_transform: Optional[Callable] = None

  @property
  def num_examples(self) -> int:
    """Training examples."""
    return int(np.shape(self.inputs)[0])


@dataclasses.dataclass(frozen=True)
class Method:
  """One method: its name (and `title` in tables), settings, needs, and how it trains.

  `config` is the settings dataclass whose fields are the method's flags (several methods may
  share one, or extend another's); `needs` names the `Networks` builders it trains;
  `shares_training_with` names the method whose trained model it starts from when a benchmark's
  runs share a checkpoint folder (vi for refined_vi and vi_equal_compute), so a table runs them
  one after another; `refines` says whether it refines samples (paper Algorithm 1);
  `takes_input_transform` whether it trains on augmented batches, `takes_penalty` whether it
  can add a penalty of point-estimated weights (ResNet-20's L2); `order` places it in tables.
  """

  name: str
  title: str
  config: type
  needs: tuple[str, ...]
  train: Callable[[TrainingInputs], MethodRun]
  order: int
  summary: str
  shares_training_with: Optional[str] = None
  refines: bool = False
  takes_input_transform: bool = True
  takes_penalty: bool = True

  def __post_init__(self):
    unknown = set(self.needs) - set(NETWORK_KINDS)
    if unknown:
      raise ValueError(f"method {self.name}: needs {sorted(unknown)}; allowed: {NETWORK_KINDS}")


_METHODS: dict[str, Method] = {}


def _discover() -> dict[str, Method]:
  """Every `METHOD` of this package's modules, by name, in table order (imported once)."""
  if not _METHODS:
    package = sys.modules[__package__]
    found = []
    for module_info in pkgutil.iter_modules(package.__path__):
      module = importlib.import_module(f"{__package__}.{module_info.name}")
      if isinstance(getattr(module, "METHOD", None), Method):
        found.append(module.METHOD)
    for method in sorted(found, key=lambda method: (method.order, method.name)):
      if method.name in _METHODS:
        raise ValueError(f"two modules declare the method {method.name!r}")
      _METHODS[method.name] = method
  return _METHODS


def names() -> tuple[str, ...]:
  """Every registered method's name, in table order."""
  return tuple(_discover())


def method(name: str) -> Method:
  """The method called `name`; ValueError naming the allowed ones otherwise."""
  methods = _discover()
  if name not in methods:
    raise ValueError(f"unknown method {name!r}; allowed: {', '.join(methods)}")
  return methods[name]


def names_where(predicate: Callable[[Method], bool],
                among: Optional[Sequence[str]] = None) -> tuple[str, ...]:
  """The names (of `among`, else of all) of the methods for which `predicate` holds."""
  return tuple(name for name in (among if among is not None else names())
               if predicate(method(name)))


def methods_for(supplies: Sequence[str], penalty: bool = False) -> tuple[str, ...]:
  """The methods a benchmark offers: those whose `needs` its `Networks` supply (`supplies`,
  from NETWORK_KINDS), and that take its penalty of point-estimated weights if it has one."""
  unknown = set(supplies) - set(NETWORK_KINDS)
  if unknown:
    raise ValueError(f"supplies {sorted(unknown)}; allowed: {NETWORK_KINDS}")
  return names_where(lambda candidate: set(candidate.needs) <= set(supplies)
                     and (candidate.takes_penalty or not penalty))


def trains_with(config: Any, settings_class: type) -> bool:
  """Whether the method `config.method` names takes `settings_class`'s settings (its settings
  class is it or extends it), e.g. whether a run's method is one of the VI family."""
  return issubclass(method(config.method).config, settings_class)


def configs_of(method_names: Sequence[str]) -> tuple[type, ...]:
  """The settings classes of `method_names` to compose a binary's config from: each once, none
  that another of them extends (its fields come with the extension), in table order."""
  classes = []
  for name in method_names:
    config = method(name).config
    if config not in classes:
      classes.append(config)
  return tuple(config for config in classes
               if not any(other is not config and issubclass(other, config) for other in classes))


def training_jobs(method_names: Sequence[str]) -> list[list[str]]:
  """`method_names` grouped into jobs: the methods that start from one trained model (its
  `shares_training_with` and itself) in one job, in table order, the others alone."""
  for name in method_names:
    method(name)
  groups: dict[str, list[str]] = {}
  for name in names():
    if name in method_names:
      groups.setdefault(method(name).shares_training_with or name, []).append(name)
  return list(groups.values())


def _main(argv: Sequence[str]) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m methods.registry",
      description="Lists the registered methods, or groups methods into a table's jobs.")
  parser.add_argument("--jobs", metavar="METHODS",
                      help="space-separated methods: print one line per job (methods that share "
                      "a trained model run in one job, in order)")
  arguments = parser.parse_args(argv)
  if arguments.jobs is None:
    for registered in _discover().values():
      print(f"{registered.name:18} {registered.summary}")
    return 0
  try:
    jobs = training_jobs(arguments.jobs.split())
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  for job in jobs:
    print(" ".join(job))
  return 0


if __name__ == "__main__":
  # Run as a script this file is __main__; the method modules register with methods.registry.
  from methods import registry as _registry
  sys.exit(_registry._main(sys.argv[1:]))
