"""A settings dataclass as absl flags, and the parsed flags as the settings again.

One flag per field of the config dataclass, with the help text, choices and bounds its
`common.config.setting` declares; a method's own settings are grouped under the method's module
in --helpfull. `runner.cli.main` and `runner.made` read a binary's flags this way.
"""
from __future__ import annotations

import dataclasses
import sys

from absl import flags

from common.config import Config, UsageError, describe_allowed, field_type


def _help_text(field: dataclasses.Field) -> str:
  allowed = describe_allowed(field)
  text = field.metadata.get("help") or field.name.replace("_", " ")
  return f"{text} Allowed: {allowed}." if allowed and not field.metadata.get("choices") else text


_DEFINERS = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}


# Settings declared in these packages are a method's own (`methods.registry`): their flags are
# grouped under the method's module in --helpfull.
METHOD_PACKAGES = ("methods.",)


def declaring_module(config_class: type, name: str) -> str:
  """The module of the class that first declared field `name` among `config_class`'s bases (a
  method's settings class, say, even where a benchmark overrides the default)."""
  for base in reversed(config_class.__mro__):
    if name in vars(base).get("__annotations__", {}):
      return base.__module__
  return config_class.__module__


def define_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """One flag per field of `config_class` (enum flags for choices, list flags for tuples).

  The benchmark's, the device's and the settings every method takes count as the main module's,
  so `--help` lists them; each method's own settings are listed by `--helpfull` under the
  module that declares them (methods/<method>.py).
  """
  main_module = sys.argv[0]
  for field in dataclasses.fields(config_class):
    kind, is_tuple = field_type(config_class, field)
    # The declared default: an instance may resolve it (ImageConfig's pixel_scaling "by_method").
    default, help_text = field.default, _help_text(field)
    choices = field.metadata.get("choices")
    module = declaring_module(config_class, field.name)
    if not module.startswith(METHOD_PACKAGES):
      module = main_module
    arguments = dict(module_name=module, flag_values=flag_values)
    if is_tuple:
      flags.DEFINE_list(field.name, [str(value) for value in default], help_text, **arguments)
    elif choices and kind is str:
      flags.DEFINE_enum(field.name, default, list(choices), help_text, **arguments)
    else:
      _DEFINERS.get(kind, flags.DEFINE_string)(field.name, default, help_text, **arguments)
  flags.DEFINE_string("output_dir", None, "Where results.json, checkpoints and summaries go "
                      "(created if missing).", module_name=main_module, flag_values=flag_values)
  flags.DEFINE_bool("tf_log", False,
                    "Show TensorFlow's own start-up and checkpoint logging on stderr.",
                    module_name=main_module, flag_values=flag_values)


def config_from_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS) -> Config:
  """The config the parsed flags describe (list flags converted element-wise); unchecked but for
  a setting turned on on the command line without the setting it needs (`only_with`)."""
  values = {}
  for field in dataclasses.fields(config_class):
    kind, is_tuple = field_type(config_class, field)
    value = flag_values[field.name].value
    if is_tuple:
      try:
        value = tuple(kind(element) for element in value)
      except ValueError:
        raise UsageError(
            f"{field.name}={','.join(value)} must list values of type {kind.__name__}") from None
    values[field.name] = value
  for field in dataclasses.fields(config_class):
    needed = field.metadata.get("only_with")
    if needed and values[field.name] and flag_values[field.name].present and not values[needed]:
      raise UsageError(f"--{field.name} does nothing without --{needed}; allowed: it with "
                       f"--{needed}")
  return config_class(**values)
