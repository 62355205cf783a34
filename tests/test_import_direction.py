"""Imports run one way: down DESIGN.md's layers, never up (docs/layout.md, "which way imports run").

The bug this catches: a module importing a package of a layer above its own, at module level or
inside a function, e.g. common/ importing the library (common/seeding.py imported
auxiliary_sampling.validation, and four more common/ modules the library, before this test), the
library importing methods/ or runner/, methods/ importing runner/, a binary importing another, or
a binary importing report/. Each such import means the lower layer cannot be used, tested or moved
without the one above it, and it is the first half of an import cycle.

The layers, top to bottom (a package imports its own modules and those of the layers below):
  benchmarks/ backfill/                     tools over the binaries: the speed measurements time
                                            the binaries' own code, the backfill scripts recompute
                                            metrics of their committed runs
  uci/ image/ resnet/ bandits/ toy/         the binaries; none imports another (what two need
                                            lives below them, once)
  runner/ -> methods/ -> auxiliary_sampling/ -> common/
Beside them: report/ may import any package, and no package imports it but report/, tests/ and
the three scripts in REPORT_READERS (each says why); tests/ may import anything, nothing imports it.
A new top-level package fails the last test until it is given a place here.

Static (the `ast` of every module, nothing imported, no TensorFlow): it sees `import` and `from`
statements wherever they stand, relative ones included. Imports by a name computed at run time are
not dependencies of the code and are not seen: the registry's discovery of methods/' own modules,
and `python -m runner.made BINARY`, which loads the binary its command line names.

Mutation: `from runner import cli` inside a function of a common/ module fails
test_imports_run_down_the_layers, naming that file and line, runner, and what common/ may import.
"""
from __future__ import annotations

import ast
import dataclasses
import os
from typing import Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_TOP_LEVEL = ("results",)   # run outputs, no code

LAYERS = (
    ("benchmarks", "backfill"),
    ("uci", "image", "resnet", "bandits", "toy"),
    ("runner",),
    ("methods",),
    ("auxiliary_sampling",),
    ("common",),
)
REPORT = "report"
TESTS = "tests"
# The modules outside report/ that import it: each summarises or patches committed runs through
# report's loader, and the committed results name its path (results/benchmarks/*/results.json
# record the command that made them; a backfilled value's note names its script), so it stays
# where those records point.
REPORT_READERS = {
    "benchmarks/uci_timings.py": "results/benchmarks/uci_timings/results.json's command",
    "benchmarks/uci_weight_noise.py": "results/benchmarks/uci_weight_noise/results.json's command",
    "backfill/uci_calibration_error.py": "the backfilled notes in committed UCI results.json files",
}
PACKAGES = frozenset(package for layer in LAYERS for package in layer) | {REPORT, TESTS}


@dataclasses.dataclass(frozen=True)
class Import:
  """One imported module of the repository: who imports it, where, and what."""
  path: str     # the importing file, relative to the repository
  line: int
  module: str   # the imported module's dotted name, relative imports resolved

  @property
  def importer(self) -> str:
    return self.path.split("/")[0]

  @property
  def imported(self) -> str:
    return self.module.split(".")[0]


def layer_of(package: str) -> int:
  """The index of `package`'s layer in LAYERS (0 is the top)."""
  return next(index for index, layer in enumerate(LAYERS) if package in layer)


def allowed_imports(package: str) -> tuple[str, ...]:
  """The other packages `package` may import: those of the layers below its own."""
  return tuple(other for layer in LAYERS[layer_of(package) + 1:] for other in layer)


def imports_of(path: str, source: str) -> Iterator[Import]:
  """Every module of the repository that `source` (the file at `path`) imports, at any depth."""
  package_parts = path.split("/")[:-1]
  for node in ast.walk(ast.parse(source, filename=path)):
    if isinstance(node, ast.Import):
      modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level:
      base = package_parts[:len(package_parts) - (node.level - 1)]
      modules = ([".".join(base + [node.module])] if node.module else
                 [".".join(base + [alias.name]) for alias in node.names])
    elif isinstance(node, ast.ImportFrom):
      modules = [node.module]
    else:
      continue
    for module in modules:
      if module.split(".")[0] in PACKAGES:
        yield Import(path, node.lineno, module)


def violation(found: Import) -> str | None:
  """Why `found` breaks the import direction, or None if it keeps it."""
  importer, imported = found.importer, found.imported
  if importer in (imported, TESTS):
    return None
  where = f"{found.path}:{found.line} imports {found.module}"
  if imported == TESTS:
    return f"{where}: nothing outside tests/ imports tests/"
  if importer == REPORT:
    return None
  if imported == REPORT:
    if found.path in REPORT_READERS:
      return None
    return (f"{where}: only report/, tests/ and {sorted(REPORT_READERS)} import report/ "
            "(it reads what the binaries write)")
  if importer not in PACKAGES:
    return f"{where}: {importer}/ has no layer in tests/test_import_direction.py"
  allowed = allowed_imports(importer)
  if imported in allowed:
    return None
  below = ", ".join(name + "/" for name in allowed) or "no other package"
  return f"{where}: {importer}/ may import only its own modules and {below} (the layers below it)"


def python_files() -> Iterator[str]:
  """Every Python file of the repository outside results/ and hidden folders, relative paths."""
  for directory, subdirectories, filenames in os.walk(REPO):
    top_level = directory == REPO
    subdirectories[:] = sorted(
        name for name in subdirectories
        if not name.startswith(".") and name != "__pycache__"
        and not (top_level and name in SKIPPED_TOP_LEVEL))
    for filename in sorted(filenames):
      if filename.endswith(".py"):
        yield os.path.relpath(os.path.join(directory, filename), REPO).replace(os.sep, "/")


def repository_imports() -> list[Import]:
  found = []
  for path in python_files():
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
      found += imports_of(path, handle.read())
  return found


def test_imports_run_down_the_layers():
  offenders = [message for message in map(violation, repository_imports()) if message]
  assert not offenders, (f"{len(offenders)} imports against the layers:\n" + "\n".join(offenders))


def test_every_report_reader_exists_and_still_imports_report():
  """An entry left behind by a script that moved or stopped reading report/ would let another
  module of that name import report/ unnoticed."""
  readers = {found.path for found in repository_imports() if found.imported == REPORT}
  assert set(REPORT_READERS) <= readers, sorted(set(REPORT_READERS) - readers)


def test_every_top_level_package_has_a_place():
  unplaced = sorted({path.split("/")[0] for path in python_files()} - PACKAGES)
  assert not unplaced, (f"packages {unplaced} are in no layer of tests/test_import_direction.py; "
                        "give each one (DESIGN.md's layers) so that its imports are checked")


def test_a_function_level_import_up_the_layers_is_named_with_its_line():
  """The checker itself: an import inside a function counts like one at the top of the module."""
  source = ("import numpy as np\n\nfrom common import config\n\n\ndef describe():\n"
            "  from runner import cli\n  return cli\n")
  messages = [violation(found) for found in imports_of("common/seeding.py", source)]
  assert messages == [None, "common/seeding.py:7 imports runner: common/ may import only its own "
                      "modules and no other package (the layers below it)"]
  library = next(imports_of("auxiliary_sampling/refine.py", "from methods import vi\n"))
  assert violation(library).endswith("auxiliary_sampling/ may import only its own modules and "
                                     "common/ (the layers below it)")


def test_relative_imports_resolve_to_the_package_they_name():
  source = "from .. import registry\nfrom ..trainers.vi import train\nfrom . import vi\n"
  modules = [found.module for found in imports_of("methods/trainers/vogn.py", source)]
  assert modules == ["methods.registry", "methods.trainers.vi", "methods.trainers.vi"]
