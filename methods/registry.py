"""The method registry: every method the benchmarks compare, found by name.

A method is one module of this package that defines `METHOD`, a `Method`: its
name, its own settings (a `common.config.Config` dataclass whose fields become
its flags), what it needs from a benchmark (the kinds of network it builds,
each a builder of the benchmark's `Networks`), and `train`, which trains it and
returns the `MethodRun` it predicts with. The registry finds the modules itself
and keeps no list of network kinds (a benchmark offers the methods whose needs
its builders cover), so adding a method, even one that needs an architecture
of its own, is adding its module and the builders of the benchmarks that offer
it; the binaries, `common/run_table.sh` (`python -m methods.registry`) and the
benchmarks' configs ask it which methods exist and which settings they take.

Nothing here imports TensorFlow: the binaries build their flags from the
settings before it loads, and a method's `train` imports what it trains with.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import pkgutil
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
  import tensorflow as tf
  from auxiliary_sampling.refinement_result import RefinementResult

# Trained state a setting can shape (`common.config.setting(shapes=...)`), by checkpoint: the
# mean-field model of VI, its further training in vi_equal_compute, MNF's, the ensemble's,
# VOGN's mean-field model and the particles.
VI, EXTRA_VI, MNF, ENSEMBLE, VOGN, PARTICLES = ("vi", "extra_vi", "mnf", "deep_ensemble", "vogn",
                                                "particles")
# The checkpoint of a refinement in progress (refined_vi, refined_vogn): every setting that shapes
# a run's results shapes it (`common.config.Config.identity()`).
REFINEMENT = "refinement"


@dataclasses.dataclass
class Networks:
  """A benchmark's architectures: a builder for each kind of network it supplies, by the kind's
  name (`methods.network_kinds`, or a method's own), and the penalty its point estimates take.

  What a builder takes and returns is its kind's (e.g. `network_kinds.MEAN_FIELD`: num_members,
  None for no member axis, -> a mean-field network); a method builds the kinds it `needs`.
  """

  builders: Mapping[str, Callable[..., "tf.Module"]]
  # Penalty of a network's point-estimated weights per example (ResNet-20's L2), or None.
  penalty: Optional[Callable[[Any], "tf.Tensor"]] = None

  def __post_init__(self):
    self.builders = dict(self.builders)
    for kind, builder in self.builders.items():
      if not isinstance(kind, str) or not kind or not callable(builder):
        raise ValueError(f"Networks: kind {kind!r} needs a name and a callable builder, not "
                         f"{builder!r}")

  def kinds(self) -> tuple[str, ...]:
    """The kinds of network this benchmark supplies."""
    return tuple(self.builders)

  def builder(self, kind: str) -> Callable[..., "tf.Module"]:
    """The builder of `kind`'s networks; ValueError naming the kinds supplied otherwise."""
    if kind not in self.builders:
      raise ValueError(f"this benchmark supplies no {kind!r} networks; it supplies: "
                       f"{', '.join(self.builders) or 'none'}")
    return self.builders[kind]


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
  share one, or extend another's); `needs` names the kinds of network it builds
  (`Networks.builder`); `shares_training_with` names the method whose trained model it starts
  from when a benchmark's runs share a checkpoint folder (vi for refined_vi and
  vi_equal_compute), so a table runs them one after another; `refines` says whether it refines
  samples (paper Algorithm 1); `takes_input_transform` whether it trains on augmented batches,
  `takes_penalty` whether it can add a penalty of point-estimated weights (ResNet-20's L2);
  `order` places it in tables.
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
    if (not isinstance(self.needs, tuple)
        or not all(isinstance(kind, str) and kind for kind in self.needs)):
      raise ValueError(f"method {self.name}: needs must be a tuple of network kinds' names, not "
                       f"{self.needs!r}")


_METHODS: dict[str, Method] = {}


def _in_table_order(methods: Sequence[Method]) -> dict[str, Method]:
  """`methods` by name, in table order; ValueError if two share a name."""
  ordered: dict[str, Method] = {}
  for method in sorted(methods, key=lambda method: (method.order, method.name)):
    if method.name in ordered:
      raise ValueError(f"two methods are called {method.name!r}")
    ordered[method.name] = method
  return ordered


def _discover() -> dict[str, Method]:
  """Every `METHOD` of this package's modules, by name, in table order (imported once)."""
  if not _METHODS:
    package = sys.modules[__package__]
    found = []
    for module_info in pkgutil.iter_modules(package.__path__):
      module = importlib.import_module(f"{__package__}.{module_info.name}")
      if isinstance(getattr(module, "METHOD", None), Method):
        found.append(module.METHOD)
    _METHODS.update(_in_table_order(found))
  return _METHODS


@contextlib.contextmanager
def extended_with(extra: Method) -> Iterator[Method]:
  """Registers `extra`, a method no module of this package declares (a test's), in table order
  while the block runs; the registry is as it was afterwards."""
  registered = dict(_discover())
  extended = _in_table_order([*registered.values(), extra])
  _METHODS.clear()
  _METHODS.update(extended)
  try:
    yield extra
  finally:
    _METHODS.clear()
    _METHODS.update(registered)


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
  """The methods a benchmark offers: those whose `needs` its `Networks` supply (`supplies`, its
  `Networks.kinds()`), and that take its penalty of point-estimated weights if it has one.

  A kind no registered method needs is refused (a misspelt kind would offer nothing)."""
  needed = {kind for name in names() for kind in method(name).needs}
  unknown = set(supplies) - needed
  if unknown:
    raise ValueError(f"supplies {sorted(unknown)}, which no method needs; the methods need: "
                     f"{', '.join(sorted(needed))}")
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
