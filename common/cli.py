"""Running an absl binary with the project's error conventions.

Bad input (unknown flag, out-of-range value, unknown name) prints one line on
stderr naming the value and what is allowed and exits with status 2; a
runtime failure (missing file, non-finite loss) prints one line and exits
with status 1. No results file is written in either case.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

from absl import app, flags


class UsageError(ValueError):
  """A flag value that is not allowed."""


def flag_values(names) -> dict[str, Any]:
  """The values of the named flags (the binary's own), for results files."""
  return {name: flags.FLAGS[name].value for name in names}


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def run(main: Callable[[list[str]], Any]) -> None:
  """app.run(main) with one-line errors and exit status 2 (usage) or 1 (runtime)."""
  def wrapped(argv):
    if len(argv) > 1:
      print(f"error: unexpected positional arguments {argv[1:]}; use --flag=value", file=sys.stderr)
      sys.exit(2)
    try:
      main(argv)
    except ValueError as error:
      print(f"error: {error}", file=sys.stderr)
      sys.exit(2)
    except (OSError, FloatingPointError, RuntimeError) as error:
      print(f"error: {error}", file=sys.stderr)
      sys.exit(1)
  app.run(wrapped, flags_parser=_parse_flags)


def require(condition: bool, message: str) -> None:
  """Raises UsageError(message) unless `condition`."""
  if not condition:
    raise UsageError(message)



def define_config_flags(config_class, exclude=()) -> None:
  """One absl flag per field of a config dataclass (type from the default: bool, int, float, else string).

  Fields named in `exclude` are left to the binary (enums, paths with their own defaults).
  """
  for field in dataclasses.fields(config_class):
    if field.name in exclude:
      continue
    default = field.default
    help_text = f"See {config_class.__name__}.{field.name}."
    if isinstance(default, bool):
      flags.DEFINE_bool(field.name, default, help_text)
    elif isinstance(default, int):
      flags.DEFINE_integer(field.name, default, help_text)
    elif isinstance(default, float):
      flags.DEFINE_float(field.name, default, help_text)
    else:
      flags.DEFINE_string(field.name, default, help_text)
