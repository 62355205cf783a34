"""The fixed runs of the numerical fingerprint (`benchmarks.numerics_fingerprint`), by group.

Each is a `python -m <binary>` command with its flags; paths under the work and data directories
are written as WORK_DIR_PLACEHOLDER and DATA_DIR_PLACEHOLDER, so that the list is the same
wherever it runs. The groups (uci, lenet5_smoke, resnet_tiny, bandit_tiny, toy) are described in
the binary's docstring.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Sequence

WORK_DIR_PLACEHOLDER, DATA_DIR_PLACEHOLDER = "$WORK_DIR", "$REFINED_VI_DATA_DIR"
UCI_METHODS = ("vi", "refined_vi", "vi_equal_compute", "vogn", "refined_vogn", "mnf",
               "deep_ensemble", "svgd", "fsvgd")
IMAGE_METHODS = ("vi", "refined_vi", "vi_equal_compute", "deep_ensemble", "mnf", "vogn",
                 "refined_vogn")
# run_all.sh --scale=smoke's flags for image/run_table.sh on MNIST.
LENET5_SMOKE_FLAGS = ("--num_train_examples=1024", "--num_test_examples=500", "--vi_steps=100",
                      "--num_samples=3", "--num_auxiliary=2", "--steps_per_auxiliary=10",
                      "--mnf_steps=50", "--ensemble_members=2", "--ensemble_steps=50",
                      "--batch_size=64")
RESNET_METHODS = ("vi", "refined_vi", "vi_equal_compute", "deep_ensemble")
# tests/test_resnet_main.py's TINY: 4 steps of 32 an epoch; refinement M = 2, K = 2, T = 2.
RESNET_TINY_FLAGS = ("--dataset=fashion_mnist", "--num_train_examples=128",
                     "--num_test_examples=64", "--batch_size=32", "--epochs=1",
                     "--decay_epochs=0.5", "--decay_factors=0.1", "--num_samples=2",
                     "--num_auxiliary=2", "--steps_per_auxiliary=2", "--ensemble_members=2")
BANDIT_AGENTS = ("refined_ts", "vi_ts", "eps_greedy", "svgd_ts", "fsvgd_ts")
BANDIT_FIXED_NOISE_AGENTS = ("refined_ts", "vi_ts")
BANDIT_TINY_FLAGS = ("--seeds=0,1", "--horizon=20", "--update_steps=20", "--refine_steps=20",
                     "--regret_report_interval=5")
# run_all.sh --scale=smoke's flags.
TOY_MULTIMODAL_FLAGS = ("--num_samples=300", "--vi_steps=500", "--refine_steps=100",
                        "--elbo_samples=3000")
TOY_EIGHT_SCHOOLS_FLAGS = ("--num_auxiliary=1,2,4", "--num_samples=300", "--initial_steps=500",
                           "--steps_per_auxiliary=100", "--nuts_chains=16", "--nuts_burnin=200",
                           "--nuts_draws=300")


@dataclasses.dataclass(frozen=True)
class Run:
  """One binary run: its key in the fingerprint, `python -m binary` and its flags (paths under
  the work and data directories written with WORK_DIR_PLACEHOLDER and DATA_DIR_PLACEHOLDER)."""
  key: str
  binary: str
  arguments: tuple[str, ...]

  @property
  def output_dir(self) -> str:
    return os.path.join(WORK_DIR_PLACEHOLDER, self.key)

  def command(self) -> str:
    return " ".join(["python", "-m", self.binary, *self.arguments])

  def argv(self, work_dir: str, data_dir: str) -> list[str]:
    return [sys.executable, "-m", self.binary,
            *(argument.replace(WORK_DIR_PLACEHOLDER, work_dir)
              .replace(DATA_DIR_PLACEHOLDER, data_dir) for argument in self.arguments)]


def _table_runs(group: str, binary: str, dataset_flag: str, dataset: str,
                methods: Sequence[str], shared: Sequence[str], variant: str = "") -> list[Run]:
  """One seed-0 run per method, sharing one VI checkpoint directory, as common/run_table.sh runs
  a table (its output under <group>/<dataset>[/<variant>]/<method>/seed_0)."""
  folder = "/".join(filter(None, (group, dataset, variant)))
  checkpoints = f"{WORK_DIR_PLACEHOLDER}/{folder}/vi_checkpoints/seed_0"
  runs = []
  for method in methods:
    key = f"{folder}/{method}/seed_0"
    runs.append(Run(key, binary, (dataset_flag, f"--method={method}", "--seed=0",
                                  f"--output_dir={WORK_DIR_PLACEHOLDER}/{key}",
                                  f"--vi_checkpoint_dir={checkpoints}", *shared)))
  return runs


def _uci_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}/uci", "--nodownload")
  return _table_runs("uci", "uci.main", "--dataset=boston_housing", "boston_housing",
                     UCI_METHODS, shared)


def _lenet5_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *LENET5_SMOKE_FLAGS)
  return _table_runs("lenet5_smoke", "image.main", "--dataset=mnist", "mnist", IMAGE_METHODS,
                     shared)


def _resnet_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *RESNET_TINY_FLAGS)
  hybrid = _table_runs("resnet_tiny", "resnet.main", "--variational=hybrid", "fashion_mnist",
                       RESNET_METHODS, ("--batchnorm", *shared), variant="hybrid_bn")
  full = _table_runs("resnet_tiny", "resnet.main", "--variational=full", "fashion_mnist",
                     ("vi",), ("--num_eval_samples=1", *shared), variant="full")
  return hybrid + full


def _bandit_runs() -> list[Run]:
  shared = ("--intra_op_threads=1", f"--data_dir={DATA_DIR_PLACEHOLDER}", "--nodownload",
            *BANDIT_TINY_FLAGS)
  runs = []
  for noise, agents in (("learned", BANDIT_AGENTS), ("1.0", BANDIT_FIXED_NOISE_AGENTS)):
    for agent in agents:
      key = f"bandit_tiny/mushroom/noise_{noise}/{agent}"
      runs.append(Run(key, "bandits.main", (f"--agents={agent}", f"--noise_scale={noise}",
                                            f"--output_dir={WORK_DIR_PLACEHOLDER}/{key}",
                                            *shared)))
  return runs


def _toy_runs() -> list[Run]:
  return [Run(f"toy/{name}/refined_vi/seed_0", f"toy.{name}",
              (f"--output_dir={WORK_DIR_PLACEHOLDER}/toy/{name}/refined_vi/seed_0", *settings))
          for name, settings in (("multimodal", TOY_MULTIMODAL_FLAGS),
                                 ("eight_schools", TOY_EIGHT_SCHOOLS_FLAGS))]


GROUPS = {"uci": _uci_runs, "lenet5_smoke": _lenet5_runs, "resnet_tiny": _resnet_runs,
          "bandit_tiny": _bandit_runs, "toy": _toy_runs}


def runs_of(groups: Sequence[str]) -> dict[str, list[Run]]:
  """The fixed runs of each of `groups`, in the order they run."""
  return {group: GROUPS[group]() for group in groups}
