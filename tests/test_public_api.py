"""auxiliary_sampling's public surface: every name in `__all__` imports from the package, is the
object its module defines, and loading the package stays cheap (names load on first use).

Mutations: a name in `__all__` that no module defines, or one mapped to a module that does not
define it, fails the first test; an eager import of a TensorFlow module in `__init__` fails the
cost test; dropping the guard that keeps `refine` the function fails the refine test."""
import ast
import importlib
import os
import pkgutil
import subprocess
import sys

import auxiliary_sampling

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(REPO, "auxiliary_sampling")
# The packages above the library: it imports none of them (common/ is below it, DESIGN's layers).
ABOVE = ("methods", "runner", "report", "uci", "image", "resnet", "bandits", "toy", "benchmarks",
         "backfill", "tests")


def test_every_public_name_imports_from_the_package_and_is_a_modules_own():
  assert auxiliary_sampling.__all__ == sorted(set(auxiliary_sampling.__all__))
  modules = [importlib.import_module(f"auxiliary_sampling.{info.name}")
             for info in pkgutil.iter_modules([LIBRARY])]
  for name in auxiliary_sampling.__all__:
    value = getattr(auxiliary_sampling, name)
    assert any(getattr(module, name, None) is value for module in modules), name
  namespace = {}
  exec("from auxiliary_sampling import *", namespace)  # pylint: disable=exec-used
  assert set(auxiliary_sampling.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error():
  try:
    auxiliary_sampling.no_such_name  # pylint: disable=pointless-statement
  except AttributeError as error:
    assert "no_such_name" in str(error)
  else:
    raise AssertionError("an unknown name resolved")


def test_importing_a_numpy_only_module_does_not_load_tensorflow():
  code = ("import sys, auxiliary_sampling, auxiliary_sampling.schedule; "
          "print('tensorflow' in sys.modules)")
  completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                             text=True, check=True, timeout=120)
  assert completed.stdout.strip() == "False", completed.stderr


def test_refine_is_the_function_even_after_its_module_loaded_first():
  code = ("from auxiliary_sampling.refine import Refiner\n"
          "from auxiliary_sampling import refine\n"
          "import auxiliary_sampling\n"
          "print(callable(refine) and refine is auxiliary_sampling.refine and "
          "refine.__module__ == 'auxiliary_sampling.refine')")
  completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                             text=True, check=True, timeout=300)
  assert completed.stdout.strip() == "True", completed.stderr


def test_the_library_imports_nothing_above_it():
  offenders = []
  for filename in sorted(os.listdir(LIBRARY)):
    if not filename.endswith(".py"):
      continue
    with open(os.path.join(LIBRARY, filename), encoding="utf-8") as handle:
      tree = ast.parse(handle.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module or ""]
      else:
        continue
      offenders += [f"{filename}: {name}" for name in names if name.split(".")[0] in ABOVE]
  assert not offenders, offenders
