"""Settings of the UCI regression binary (paper Table 1); the defaults are the paper's."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from runner.config import REFINED, MethodConfig
from common.config import (NOTHING, RESULTS, UsageError, data_dir_setting, download_setting,
                           setting, with_default)
from common.distribution import DeviceConfig
from methods import network_kinds, registry
from methods.registry import ENSEMBLE, EXTRA_VI, MNF, PARTICLES, VI, VOGN
from uci import data

# The UCI networks come in every kind (mean-field, MNF, ensemble, particles): every method runs.
METHODS = registry.methods_for((network_kinds.MEAN_FIELD, network_kinds.MNF,
                                 network_kinds.ENSEMBLE, network_kinds.PARTICLES))


@dataclasses.dataclass
class UciConfig(MethodConfig, *registry.configs_of(METHODS)):
  """One dataset, one method, one seed."""

  method: str = setting("refined_vi", "Method to train and evaluate.", choices=METHODS,
                        shapes=RESULTS)
  dataset: str = setting("boston_housing", "UCI dataset (the paper's names).",
                         choices=sorted(data.DATASETS))
  split: str = setting(
      "random_80_20", "Split protocol: a random 80/20 split from the seed, or the standard "
      "90/10 protocol of Hernandez-Lobato & Adams (20 splits, protein 5; split = seed) on "
      "permutations of our own (the published index files are not among our data).",
      choices=data.SPLITS)
  input_scaling: str = setting(
      "unit", "Standardised inputs' scale: unit (std 1 per feature) or unit_over_sqrt_dim (std "
      "1/sqrt(D), the f-POVI authors' preprocessing, which their published numbers used).",
      choices=data.INPUT_SCALINGS)
  data_dir: Optional[str] = data_dir_setting("<dir>/<dataset>/data.txt", "$REFINED_VI_DATA_DIR/uci")
  download: bool = download_setting()
  hidden_units: int = setting(50, "ReLU units of each hidden layer.", minimum=1)
  num_hidden_layers: int = setting(
      1, "Hidden layers (the paper's 1; the f-POVI paper's Table 8 used 2 of 10 units). MNF has "
      "one.", minimum=1, maximum=10, shapes=(VI, EXTRA_VI, ENSEMBLE, VOGN, PARTICLES))
  initial_noise_scale: float = setting(
      1.0, "Initial noise scale of the Gaussian likelihood (standardised units; learned as a point "
      "estimate).", above=1e-3, shapes=(VI, EXTRA_VI, MNF, VOGN, PARTICLES))
  # Its steps are a few hundred tiny ops: compiled 100 at a time, VI's step runs 3-5x faster
  # (benchmarks.step_floor, benchmarks.uci_run_time). --nojit_compile --noise_chunk_steps=0 gives
  # the draws of runs made before this default. Compiled, VI keeps TensorFlow's threads (a whole
  # Boston run 14.45 s against one thread's 15.46 s, 5 paired rounds in
  # results/benchmarks/uci_run_time/threads_check.md, when refinement was compiled too and not
  # traced beside VI); the refined methods now take one (`thread_count`).
  jit_compile: bool = with_default(DeviceConfig, "jit_compile", True)
  # Refinement's 1,000 steps run 1.6x faster compiled, but compiling costs more than that saves:
  # a whole Boston run takes 14.4 s with them uncompiled against 15.3 s (same numbers).
  jit_compile_refinement: bool = with_default(MethodConfig, "jit_compile_refinement", False)
  # The ensemble's 10 members of 5,000 steps run 1.2x faster uncompiled on one thread
  # (benchmarks.step_floor: 1.00 against 1.20 ms per step; the floor, a hand-written loop, 0.85).
  jit_compile_ensemble: bool = with_default(MethodConfig, "jit_compile_ensemble", False)
  noise_chunk_steps: int = with_default(DeviceConfig, "noise_chunk_steps", 100)
  intra_op_threads: int = setting(
      -1, "Threads each TensorFlow op may use (0: TensorFlow's choice, $TF_NUM_INTRAOP_THREADS "
      "or every core; -1: by method: one for refined_vi, refined_vogn and deep_ensemble, "
      "TensorFlow's choice otherwise and whenever $TF_NUM_INTRAOP_THREADS is set).",
      # One thread: the refined methods' uncompiled refinement steps (a few hundred tiny ops)
      # run faster on one while their refinement is traced on a second thread during VI, and the
      # ensemble's uncompiled step too (benchmarks.step_floor, benchmarks.uci_run_time).
      minimum=-1, maximum=1024, shapes=NOTHING)

  def check(self) -> None:
    super().check()
    if self.method == "mnf" and self.num_hidden_layers != 1:
      raise UsageError(f"--num_hidden_layers={self.num_hidden_layers}: the MNF network has one "
                       "hidden layer; allowed: 1 with --method=mnf")

  def thread_count(self) -> int:
    """--intra_op_threads, -1 resolved by method (one thread for the refined methods: a whole
    Boston refined_vi run 12.5 s against 13.2 s with TensorFlow's choice, median of 6 paired
    rounds, 5 of 6 pairs faster; for the ensemble's uncompiled chunks, 1.00 against 1.54 ms per
    step in benchmarks.step_floor; MNF ran 12 % slower on one). $TF_NUM_INTRAOP_THREADS, if set, is
    TensorFlow's choice and is kept."""
    if self.intra_op_threads >= 0:
      return self.intra_op_threads
    one_thread = REFINED + ("deep_ensemble",)
    if self.method in one_thread and not os.environ.get("TF_NUM_INTRAOP_THREADS", "").strip():
      return 1
    return 0

  @property
  def resolved_data_dir(self) -> Optional[str]:
    return self.data_dir or data.default_data_dir()

  def locate_data(self) -> None:
    data.locate_files(self.dataset, self.resolved_data_dir, self.download)
