"""Run settings as dataclasses: the one source of every binary's flags, help text and checks.

Each field is declared with `setting(...)`, which carries its help text, its
allowed values (choices or bounds) and which trained state it shapes. From
that one declaration `runner.config_flags` generates the absl flag (enum flags for
choices, list flags for tuples), `Config.validate()` checks a value, and
`Config.differences()` tells a rerun whether recorded state was made with
the same settings. This module does not import TensorFlow, so bad flags are
refused before it loads.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from typing import Any, Mapping, Optional, Sequence

# What trained state a field shapes: every checkpoint and result ("all"), only the
# results of a run ("results": evaluation and refinement settings), nothing at all
# ("nothing": where files are, how often to checkpoint), or the checkpoints of the
# named trainers (a tuple of names such as "vi", "mnf", "deep_ensemble") and results.
ALL, RESULTS, NOTHING = "all", "results", "nothing"


# `setting(absent_means=...)` left out: a record without the setting was made with the default.
_DEFAULT = object()


class UsageError(ValueError):
  """A setting that is not allowed: one line naming the value and what is allowed (exit 2)."""


def setting(default: Any, help: str, *, choices: Optional[Sequence[Any]] = None,  # noqa: A002
            minimum: Optional[float] = None, maximum: Optional[float] = None,
            above: Optional[float] = None, below: Optional[float] = None,
            shapes: Any = ALL, directory: bool = False, absent_means: Any = _DEFAULT,
            only_with: Optional[str] = None,
            only_when: Optional[tuple[str, Any]] = None, round_off: bool = False) -> Any:
  """A dataclass field with its help text and allowed values.

  `minimum`/`maximum` are inclusive bounds, `above`/`below` exclusive ones;
  `choices` lists the allowed values (for a tuple field: of each element);
  `shapes` says which trained state the value shapes (see ALL, RESULTS,
  NOTHING); `directory=True`: a value that is set must name an existing folder;
  `absent_means`: the value runs recorded before the setting existed were made
  with (by default the default; give it when a default changes, so that such a
  run is not taken for one made with the new default); `only_with`: the boolean setting
  without which this one does nothing (turning it on explicitly without that one is a usage
  error, `runner.config_flags.config_from_flags`); `only_when=(name, value)`: the setting does
  nothing unless setting `name` has `value`, or one of them if `value` is a tuple (so a table's
  commands leave it out otherwise, and a record of it there is no mismatch); `round_off=True`:
  a setting that shapes nothing (no rerun is refused over it) but changes a run's numbers by
  floating-point round-off, as compiling a loop with XLA does, so a command that remakes a run
  bit for bit must carry its recorded value (`Config.remake_settings`).
  """
  metadata = {"help": help, "choices": tuple(choices) if choices is not None else None,
              "minimum": minimum, "maximum": maximum, "above": above, "below": below,
              "shapes": shapes, "directory": directory, "absent_means": absent_means,
              "only_with": only_with, "only_when": _value_set(only_when), "round_off": round_off}
  if isinstance(default, (list, dict, set)):
    raise TypeError(f"mutable default {default!r}: use a tuple")
  return dataclasses.field(default=default, metadata=metadata)


def _value_set(only_when: Optional[tuple[str, Any]]) -> Optional[tuple[str, tuple]]:
  """`only_when` with its value(s) as a tuple of the values at which the setting acts."""
  if only_when is None or isinstance(only_when[1], tuple):
    return only_when
  return (only_when[0], (only_when[1],))


@functools.lru_cache(maxsize=None)
def _type_hints(config_class: type) -> dict[str, Any]:
  """The class's resolved annotations, once per class (resolving them takes ~1 ms, and flags,
  configs and checks ask for every field's)."""
  return typing.get_type_hints(config_class)


def field_type(config_class: type, field: dataclasses.Field) -> tuple[type, bool]:
  """(the field's scalar type, whether it is a tuple of them); Optional[X] counts as X."""
  annotation = _type_hints(config_class)[field.name]
  is_tuple = False
  if typing.get_origin(annotation) is typing.Union:
    annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
  if typing.get_origin(annotation) is tuple:
    is_tuple, annotation = True, typing.get_args(annotation)[0]
  return annotation, is_tuple


def describe_allowed(field: dataclasses.Field) -> str:
  """The allowed values of a field in words, e.g. "one of a, b" or ">= 1"."""
  meta = field.metadata
  if meta.get("choices"):
    return "one of " + ", ".join(str(choice) for choice in meta["choices"])
  parts = []
  for key, symbol in (("minimum", ">="), ("above", ">"), ("maximum", "<="), ("below", "<")):
    if meta.get(key) is not None:
      parts.append(f"{symbol} {meta[key]:g}")
  return " and ".join(parts)


def _check_value(name: str, value: Any, kind: type, field: dataclasses.Field) -> None:
  meta = field.metadata
  if value is None:
    if field.default is None:
      return
    raise UsageError(f"{name} is not set; allowed: {describe_allowed(field) or kind.__name__}")
  if meta.get("directory") and not os.path.isdir(value):
    raise UsageError(f"{name}={value} is not a folder; allowed: an existing folder, or unset")
  if kind is bool:
    if not isinstance(value, bool):
      raise UsageError(f"{name}={value!r} must be true or false")
    return
  if kind in (int, float):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
        kind is int and not isinstance(value, int)):
      raise UsageError(f"{name}={value!r} must be {'an integer' if kind is int else 'a number'}")
    if not math.isfinite(value):
      raise UsageError(f"{name}={value} must be a finite number")
  if meta.get("choices") and value not in meta["choices"]:
    raise UsageError(f"{name}={value!r} is not allowed; allowed: {describe_allowed(field)}")
  bounds = (("minimum", lambda v, b: v >= b), ("above", lambda v, b: v > b),
            ("maximum", lambda v, b: v <= b), ("below", lambda v, b: v < b))
  for key, holds in bounds:
    if meta.get(key) is not None and not holds(value, meta[key]):
      raise UsageError(f"{name}={value} is out of range; allowed: {describe_allowed(field)}")


@dataclasses.dataclass
class Config:
  """Base of the settings dataclasses: field checks from the declarations, plus `check()`.

  A subclass (itself a dataclass) declares its fields with `setting(...)` and
  may override `check()` for relations between fields; `validate()` runs both.
  """

  replace_mismatched: bool = setting(
      False,
      "Discard a results.json or checkpoint made with other settings and start again, instead of "
      "stopping with an error. State made with the same settings is reused either way.",
      shapes=NOTHING)

  def validate(self) -> None:
    """Raises UsageError naming the first value that is not allowed, and what is allowed."""
    for field in dataclasses.fields(self):
      kind, is_tuple = field_type(type(self), field)
      value = getattr(self, field.name)
      if is_tuple:
        if not isinstance(value, tuple) or not value:
          raise UsageError(f"{field.name}={value!r} must list at least one value")
        for element in value:
          _check_value(field.name, element, kind, field)
      else:
        _check_value(field.name, value, kind, field)
    self.check()

  def check(self) -> None:
    """Relations between fields (a subclass's); raises UsageError."""

  def check_replicas(self, num_replicas: int) -> None:
    """Whether the run can use `num_replicas` replicas (a subclass's, each calling super());
    raises UsageError."""

  def locate_data(self) -> None:
    """Finds the files the run will read (downloading them where allowed) and checks their
    checksums, before TensorFlow loads, so that a missing or corrupt file ends a binary's run at
    once with one line (an OSError) rather than after TensorFlow's and the devices' start-up; the
    loaders check the files again. A config whose binary reads files overrides this."""

  def thread_count(self) -> int:
    """The intra-op thread count to set at start-up: --intra_op_threads where the binary declares
    it (>= 0 there; a config whose flag takes other values, as UciConfig's -1, overrides this),
    else 0 (TensorFlow's choice)."""
    return getattr(self, "intra_op_threads", 0)

  def as_dict(self) -> dict[str, Any]:
    """The settings as JSON-ready values (tuples as lists), as results.json records them."""
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in dataclasses.asdict(self).items()}

  def identity(self, trainer: Optional[str] = None) -> dict[str, Any]:
    """The settings that shape a trainer's checkpoint (or, with None, a run's results); a
    setting that does nothing at these values (`only_when`) is left out, so a record made
    before it existed still matches."""
    active = set(self.shaping_settings())
    selected = {}
    for field in dataclasses.fields(self):
      shapes = field.metadata.get("shapes", ALL)
      if field.name not in active:
        continue
      if trainer is not None and shapes != ALL and (shapes == RESULTS or trainer not in shapes):
        continue
      value = getattr(self, field.name)
      selected[field.name] = list(value) if isinstance(value, tuple) else value
    return selected

  def shaping_settings(self) -> list[str]:
    """Names of the settings that shape a run's results at this config's values: not those
    that shape nothing, nor those that do nothing at these values (`only_when`)."""
    return [field.name for field in dataclasses.fields(self)
            if field.metadata.get("shapes", ALL) != NOTHING and self._acts(field)]

  def _acts(self, field: dataclasses.Field) -> bool:
    """Whether the setting acts at this config's values (`only_when`)."""
    only_when = field.metadata.get("only_when")
    return only_when is None or getattr(self, only_when[0]) in only_when[1]

  def remake_settings(self) -> list[str]:
    """Names of the settings a command must give to remake a run made at this config's values
    bit for bit: those that shape its results (`shaping_settings`), then those that change its
    numbers only by round-off (`round_off`) and act at these values (`only_with`, `only_when`)."""
    names = self.shaping_settings()
    for field in dataclasses.fields(self):
      needed = field.metadata.get("only_with")
      if (field.metadata.get("round_off") and (needed is None or getattr(self, needed))
          and self._acts(field)):
        names.append(field.name)
    return names

  def differences(self, recorded: Mapping[str, Any], trainer: Optional[str] = None) -> list[str]:
    """Names of the settings in `identity(trainer)` whose recorded value differs
    (`differing_settings`: a setting absent from the record counts as `absent_values`)."""
    return differing_settings(self.identity(trainer), recorded, absent_values(self))


def _as_recorded(value: Any) -> Any:
  """`value` as a JSON record gives it back (tuples as lists), so that records compare equal."""
  if isinstance(value, (tuple, list)):
    return [_as_recorded(element) for element in value]
  if isinstance(value, Mapping):
    return {key: _as_recorded(element) for key, element in value.items()}
  return value


# What `_recorded_or_absent` gives for a setting neither recorded nor with an absent value: equal
# to no requested value, so such a setting always differs.
_NOT_RECORDED = object()


def _recorded_or_absent(recorded: Mapping[str, Any], absent: Mapping[str, Any], name: str,
                        missing: Any = _NOT_RECORDED) -> Any:
  """What a record says `name` was: its entry, else what runs did before the setting existed,
  else `missing`."""
  return recorded[name] if name in recorded else absent.get(name, missing)


def differing_settings(requested: Mapping[str, Any], recorded: Mapping[str, Any],
                       absent: Mapping[str, Any]) -> list[str]:
  """Names in `requested` whose value differs from a settings record (a results.json's flags or a
  checkpoint's settings.json), in order, for every check of state against settings.

  A name missing from the record counts as its `absent` value (`absent_values`: what runs did
  before the setting existed), so adding a setting orphans no results and no checkpoints. Names
  recorded but not requested (settings since removed, or not shaping this state) are ignored.
  """
  return [name for name, value in requested.items()
          if _as_recorded(_recorded_or_absent(recorded, absent, name)) != _as_recorded(value)]


def describe_settings(requested: Mapping[str, Any], recorded: Mapping[str, Any],
                      absent: Mapping[str, Any], names: Sequence[str],
                      label: str = "recorded") -> str:
  """"--seed=1 (recorded: 0), --split=... (recorded: ...)" for an error line: each named setting's
  requested value and what the record says (`label`: whose record)."""
  return ", ".join(
      f"--{name}={requested[name]} "
      f"({label}: {_recorded_or_absent(recorded, absent, name, 'not recorded')})"
      for name in names)


def describe_differences(config: Config, recorded: Mapping[str, Any], names: Sequence[str]) -> str:
  """`describe_settings` for a config's differences from a results.json's flags."""
  return describe_settings({name: getattr(config, name) for name in names}, recorded,
                           absent_values(config), names)


def absent_values(config: Config | type) -> dict[str, Any]:
  """Per setting of a config (or its class), the value of a run whose record lacks it:
  `absent_means`, else the declared default."""
  values = {}
  for field in dataclasses.fields(config):
    absent = field.metadata.get("absent_means", _DEFAULT)
    values[field.name] = field.default if absent is _DEFAULT else absent
  return values


def recorded_config(config_class: type, flags: Mapping[str, Any], **naming: Any) -> Config:
  """The config a results.json's `flags` describe: each setting as recorded, else the run's
  `naming` (method, dataset) for those, else its absent value (`absent_values`: what runs did
  before it existed), so a record is read the same way wherever one is compared, listed or
  remade."""
  absent = {**absent_values(config_class), **naming}
  values = {field.name: flags.get(field.name, absent[field.name])
            for field in dataclasses.fields(config_class)}
  return config_class(**{name: tuple(value) if isinstance(value, list) else value
                         for name, value in values.items()})


def with_default(config_class: type, name: str, default: Any = _DEFAULT, *,
                 only_when: Optional[tuple[str, Any]] = None) -> Any:
  """A subclass's field that keeps `config_class`'s declaration of `name` with another default
  (or, without one, its default), and, given `only_when`, acts only at those values of a
  setting the subclass has."""
  declared = config_class.__dataclass_fields__[name]
  metadata = declared.metadata
  if only_when is not None:
    metadata = {**metadata, "only_when": _value_set(only_when)}
  return dataclasses.field(default=declared.default if default is _DEFAULT else default,
                           metadata=metadata)


def data_dir_setting(layout: str, default: str) -> Any:
  """The `data_dir` field of a benchmark that reads local files (`layout`) or downloads them."""
  return setting(None, f"Local data directory ({layout}); default {default}. Missing files are "
                 "downloaded and checksummed.", shapes=NOTHING, directory=True)


def download_setting() -> Any:
  """The `download` field that goes with `data_dir_setting`."""
  return setting(True, "Download missing files (else a missing file is an error).", shapes=NOTHING)
