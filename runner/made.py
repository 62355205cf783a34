"""Whether a run is already made with given settings, decided as its binary decides it.

  python -m runner.made uci.main --dataset=yacht_hydrodynamics --method=vi --seed=0 \\
      --output_dir=results/uci/yacht_hydrodynamics/vi/seed_0 [more of the binary's flags]

prints one line and exits 0 if the output directory's results.json was made with these settings
(the binary, given the same command, would say "already holds this run" and do nothing), 3 if
not (no results.json yet, or one made with other settings: the line names the differing flags
and their recorded values), 2 for a command the binary would refuse. Nothing runs.

The flags are read as the binary reads them (`runner.config_flags.define_flags` of the settings
class the binary module names as `CONFIG_CLASS`, then `Config.validate`), and the record is
compared by `runner.output_directory.recorded_differences`, the comparison a rerun of the binary
makes: a flag stored in results.json counts, the existence of the file alone does not.
`common/run_table.sh --print_commands` and `./run_all.sh --dry_run` decide with `RunSettings` in
one process.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Sequence

from absl import flags

from common.config import Config, UsageError, describe_differences
from common.results import RESULTS_FILENAME
from runner import cli
from runner.config_flags import config_from_flags, define_flags
from runner.output_directory import recorded_differences
from runner.tensorflow_startup import stderr_silenced

NOT_MADE_STATUS = 3


@dataclasses.dataclass(frozen=True)
class RunState:
  """A run's output directory against a command's settings: `made` with them or not, and why."""
  output_dir: str
  made: bool
  differing: tuple[str, ...] = ()   # settings recorded with other values (empty if none recorded)
  description: str = ""   # "--seed=1 (recorded: 0), ..." for those

  @property
  def line(self) -> str:
    path = os.path.join(self.output_dir, RESULTS_FILENAME)
    if self.made:
      return f"made with these settings: {path}"
    if self.differing:
      return f"not made: {path} was made with other settings: {self.description}"
    return f"not made: {path} does not exist"


def config_class_of(binary: str) -> type:
  """The settings class of a binary module (`uci.main`, `toy.multimodal`, ...): its CONFIG_CLASS.

  Binaries import TensorFlow only once their flags are checked, except the toy ones."""
  try:
    with stderr_silenced():   # the toy binaries' TensorFlow start-up noise
      module = importlib.import_module(binary)
  except ImportError:
    raise UsageError(f"binary {binary!r} is not a module of this repository; allowed: uci.main, "
                     "image.main, resnet.main, bandits.main, toy.multimodal, toy.eight_schools"
                     ) from None
  config_class = getattr(module, "CONFIG_CLASS", None)
  if not (isinstance(config_class, type) and issubclass(config_class, Config)):
    raise UsageError(f"{binary} names no CONFIG_CLASS (a settings class): it is not a binary "
                     "that writes results.json")
  return config_class


class RunSettings:
  """Reads commands of one binary as the binary reads its flags, many in one process."""

  def __init__(self, binary: str):
    self.binary = binary
    self.config_class = config_class_of(binary)
    self._flag_values = flags.FlagValues()
    define_flags(self.config_class, self._flag_values)

  def parse(self, arguments: Sequence[str]) -> tuple[Config, str]:
    """(the checked settings, --output_dir) of the binary's flags `arguments`; UsageError for a
    command the binary would refuse."""
    self._flag_values.unparse_flags()
    try:
      self._flag_values([self.binary, *arguments])
    except flags.Error as error:
      raise UsageError(str(error)) from None
    config = config_from_flags(self.config_class, self._flag_values)
    config.validate()
    output_dir = self._flag_values["output_dir"].value
    cli.require(bool(output_dir), "--output_dir is required")
    return config, output_dir

  def state(self, arguments: Sequence[str]) -> RunState:
    """Whether the run `arguments` describe is already made with these settings."""
    config, output_dir = self.parse(arguments)
    found = recorded_differences(config, output_dir)
    if found is None:
      return RunState(output_dir, made=False)
    differing, recorded = found
    if not differing:
      return RunState(output_dir, made=True)
    return RunState(output_dir, made=False, differing=tuple(differing),
                    description=describe_differences(config, recorded, differing))


def main(argv: Sequence[str]) -> int:
  if not argv or argv[0].startswith("-"):
    print("error: usage: python -m runner.made BINARY_MODULE --flag=value ... (e.g. uci.main "
          "--dataset=yacht_hydrodynamics --method=vi --seed=0 --output_dir=DIR)", file=sys.stderr)
    return 2
  try:
    state = RunSettings(argv[0]).state(argv[1:])
  except UsageError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  print(state.line)
  return 0 if state.made else NOT_MADE_STATUS


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
