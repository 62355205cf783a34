"""Each measurement in its own Python process, repeated in interleaved rounds.

A fresh process per measurement keeps one variant's traced graphs, thread pools and allocator
state out of another's timing; interleaving the rounds spreads this machine's minute-to-minute
speed drift over every variant instead of charging it to whichever ran last.
"""
import json
import os
import subprocess
import sys
from typing import Callable, Iterable, Mapping, Optional, Sequence


def measure(module: str, arguments: Sequence[str],
            environment: Optional[Mapping[str, Optional[str]]] = None) -> dict:
  """Runs `python -m module arguments` and returns the JSON its last stdout line holds.

  `environment` overrides os.environ for the child; a value of None removes that variable.
  Raises RuntimeError with the child's last stderr line when it fails.
  """
  child_environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
  for name, value in (environment or {}).items():
    if value is None:
      child_environment.pop(name, None)
    else:
      child_environment[name] = value
  completed = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True,
                             text=True, check=False, env=child_environment)
  if completed.returncode != 0:
    lines = completed.stderr.strip().splitlines() or ["(no error output)"]
    raise RuntimeError(f"{module} {' '.join(arguments)}: {lines[-1]}")
  return json.loads(completed.stdout.strip().splitlines()[-1])


def interleaved_rounds(keys: Iterable, rounds: int,
                       measure_one: Callable[[object], dict]) -> dict:
  """{key: [measurement of round 1, round 2, ...]}, every key measured once per round in order."""
  keys = list(keys)
  samples = {key: [] for key in keys}
  for _ in range(rounds):
    for key in keys:
      samples[key].append(measure_one(key))
  return samples
