"""Many short runs of one binary, each as `python -m <binary> <argv>` would run it, from one
Python process: a test file's usage-error checks cost one interpreter start and one import of the
binary's flag code instead of one per check.

The process imports the binary's module and what it imports (no TensorFlow: test_config checks
that), then forks one child per command line. A child runs the module as `__main__` with that
argv and environment, its stdout and stderr going to files, and exits with the status the binary
gave.
What a check sees (exit status, stdout, stderr, files written) is the fresh process's: the
module's `__main__` code and every flag definition run again in each child, and nothing a child
does reaches the next.
"""
import json
import os
import subprocess
import sys
from typing import Any, Mapping, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the one process: reads [module, [[argv, environment changes], ...], timeout] from
# stdin, writes one [status, stdout, stderr] per command line to stdout as JSON.
_DRIVER = r"""
import importlib, json, os, runpy, signal, sys, tempfile, time, warnings
module, commands, timeout = json.load(sys.stdin)
importlib.import_module(module)   # it and its imports stay loaded; each child runs it anew
# as __main__ (runpy warns that the module is loaded already: `python -m` would not have it)
warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                        category=RuntimeWarning)
try:   # and defines its own absl flags anew (a module may define them as it is imported)
  from absl import flags
  for flag in list(flags.FLAGS.flags_by_module_dict().get(module, [])):
    if flag.name in flags.FLAGS:
      delattr(flags.FLAGS, flag.name)
except ImportError:
  pass
answers = []
for argv, environment in commands:
  with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    sys.stdout.flush(); sys.stderr.flush()
    child = os.fork()
    if child == 0:
      status = 1
      try:
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        for name, value in environment.items():
          if value is None:
            os.environ.pop(name, None)
          else:
            os.environ[name] = value
        sys.argv = [module, *argv]
        try:
          runpy.run_module(module, run_name="__main__", alter_sys=True)
          status = 0
        except SystemExit as error:
          if error.code is None or isinstance(error.code, int):
            status = error.code or 0
          else:
            print(error.code, file=sys.stderr)
        except BaseException:
          import traceback
          traceback.print_exc()
      finally:
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(status)
    deadline = time.monotonic() + timeout
    while True:
      done, wait_status = os.waitpid(child, os.WNOHANG)
      if done:
        break
      if time.monotonic() > deadline:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        wait_status = None
        break
      time.sleep(0.005)
    texts = []
    for handle in (out, err):
      handle.seek(0)
      texts.append(handle.read().decode(errors="replace"))
    status = "timeout" if wait_status is None else os.waitstatus_to_exitcode(wait_status)
    answers.append([status, *texts])
json.dump(answers, sys.stdout)
"""


def run_commands(module: str, commands: Sequence[Sequence[str]],
                 environment: Optional[Mapping[str, Optional[str]]] = None,
                 environments: Optional[Sequence[Mapping[str, Optional[str]]]] = None,
                 timeout: float = 120) -> list[subprocess.CompletedProcess]:
  """`python -m module *argv` for each argv of `commands`, in the repository, as one process;
  each run's environment is this one's with `environment`'s changes (a value of None removes the
  variable), and then its own from `environments`. A run longer than `timeout` seconds is killed
  (its returncode is then None). Returns one CompletedProcess per command, in order.

  Unlike a fresh process, a run does not see its own environment changes where the binary reads
  the environment as it is imported (the import is the process's, under `environment`), nor
  anything the import prints; the binaries' usage checks read it when they run."""
  commands = [[str(argument) for argument in argv] for argv in commands]
  changes = [dict(own) for own in environments] if environments else [{} for _ in commands]
  if len(changes) != len(commands):
    raise ValueError(f"{len(commands)} commands but {len(changes)} environments")
  payload = json.dumps([module, [[argv, own] for argv, own in zip(commands, changes)], timeout])
  base = {**os.environ}
  for name, value in (environment or {}).items():
    if value is None:
      base.pop(name, None)
    else:
      base[name] = value
  driver = subprocess.run([sys.executable, "-c", _DRIVER], input=payload, cwd=REPO,
                          capture_output=True, text=True, env=base,
                          timeout=60 + timeout * len(commands))
  if driver.returncode != 0:
    raise RuntimeError(f"the usage-run driver for {module} failed:\n{driver.stderr}")
  answers = json.loads(driver.stdout)
  if len(answers) != len(commands):
    raise RuntimeError(f"the usage-run driver for {module} answered {len(answers)} of "
                       f"{len(commands)} command lines")
  return [subprocess.CompletedProcess([sys.executable, "-m", module, *argv],
                                      None if status == "timeout" else status, out, err)
          for argv, (status, out, err) in zip(commands, answers)]


class UsageRuns:
  """The runs of `module` with each command line of `commands`, made together (`run_commands`)
  on the first lookup and kept: `runs.run(*argv)` is the CompletedProcess of the command line
  `argv` (one of `commands`). An argument holding OUTPUT_DIR gets, in its place, a path of the
  run's own under `root` that does not exist yet: `runs.output_dir(*argv)`."""

  OUTPUT_DIR = "{output_dir}"

  def __init__(self, module: str, root, commands: Sequence[Sequence[str]],
               environment: Optional[Mapping[str, Optional[str]]] = None):
    self.module, self.root, self.environment = module, root, environment
    self.commands = [tuple(argv) for argv in commands]
    if len(set(self.commands)) != len(self.commands):
      raise ValueError(f"a command line is given twice: {self.commands}")
    self._completed = None

  @classmethod
  def in_output_dirs(cls, module: str, root, flag_sets: Sequence[Sequence[str]],
                     environment: Optional[Mapping[str, Optional[str]]] = None) -> "UsageRuns":
    """The runs of `module` with each of `flag_sets`, each after an --output_dir of its own."""
    return cls(module, root, [[f"--output_dir={cls.OUTPUT_DIR}", *flags] for flags in flag_sets],
               environment)

  def in_output_dir(self, *flags: str) -> tuple[subprocess.CompletedProcess, Any]:
    """The run with `flags` after its own --output_dir (`in_output_dirs`), and that folder."""
    argv = (f"--output_dir={self.OUTPUT_DIR}", *flags)
    return self.run(*argv), self.output_dir(*argv)

  def output_dir(self, *argv: str):
    return self.root / str(self.commands.index(tuple(argv))) / "output"

  def run(self, *argv: str) -> subprocess.CompletedProcess:
    if tuple(argv) not in self.commands:
      raise KeyError(f"{argv} is not one of the command lines made together")
    if self._completed is None:
      lines = []
      for argv_made in self.commands:
        folder = self.output_dir(*argv_made)
        folder.parent.mkdir(parents=True)
        lines.append([argument.replace(self.OUTPUT_DIR, str(folder)) for argument in argv_made])
      self._completed = run_commands(self.module, lines, self.environment)
    return self._completed[self.commands.index(tuple(argv))]
