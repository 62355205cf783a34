"""Checkpoints of a refinement in progress (paper Algorithm 1), so that a run of hours resumes.

Refining a large model on a large data set takes hours on one CPU core, most of them in the
whole-dataset ELBO estimates (the members' before and after refinement: ResNet-20 on 60,000
images, ten members) and the rest in the K stages. `RefinementCheckpoint` saves into one
directory the refiner's TensorFlow state (the members' variables, every random stream's
position, the optimiser's state) and beside it `RefinementProgress`, Algorithm 1's bookkeeping
so far (log ratios, traces, stage values, the estimates made, a running estimate's partial sum):
after each estimate and each auxiliary variable, and every `checkpoint_seconds` inside a
whole-dataset estimate. A refinement resumed from it returns the uninterrupted one's result bit
for bit (tests/test_refinement_checkpoint.py).

A checkpoint records what made it (the refinement's arguments and a digest of the trained
model); a refinement with other arguments refuses it rather than resume someone else's state.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from auxiliary_sampling.elbo_estimate import ElboTerms, PartialEstimate
from common.distribution import writes_run_files
from common.results import atomic_output

_PROGRESS_PREFIX = "refinement_progress-"
# Whole-dataset estimates a refinement makes and can resume inside.
INITIAL_ESTIMATE, FINAL_ESTIMATE = "initial", "final"


def model_digest(model: tf.Module) -> str:
  """A digest of every variable's value, in the model's order: which trained model a
  refinement started from."""
  digest = hashlib.sha256()
  for variable in model.variables:
    digest.update(variable.numpy().tobytes())
  return digest.hexdigest()


@dataclasses.dataclass
class RefinementProgress:
  """Algorithm 1's bookkeeping up to a point; with the refiner's variables, all a refinement
  needs to go on from there."""

  num_members: int
  label: str = "the start"                     # where it stands (the last save's description)
  initial_elbo: Optional[np.ndarray] = None    # [M] the members' ELBO before refinement
  stage_start: Optional[np.ndarray] = None     # [M] the start's ELBO on the stage subset
  cumulative_log_ratio: Optional[np.ndarray] = None   # [M] sum_k log q_{k-1}(a_k) / p(a_k)
  log_ratios: list[np.ndarray] = dataclasses.field(default_factory=list)    # per stage, [M]
  traces: list[np.ndarray] = dataclasses.field(default_factory=list)        # per stage, [T, M]
  stage_values: list[np.ndarray] = dataclasses.field(default_factory=list)  # per stage, [M]
  optimise_seconds: list[float] = dataclasses.field(default_factory=list)
  condition_seconds: list[float] = dataclasses.field(default_factory=list)
  refine_seconds: float = 0.0      # the stages' wall time, stage estimates excluded
  stage_seconds: float = 0.0       # the stage estimates' wall time
  elapsed_seconds: float = 0.0     # wall time of the work up to the last save, all processes
  estimate_of: str = ""            # a whole-dataset estimate under way (INITIAL_ESTIMATE, ...)
  estimate: Optional[PartialEstimate] = None
  final_terms: Optional[ElboTerms] = None
  saves: int = 0

  def __post_init__(self):
    if self.cumulative_log_ratio is None:
      self.cumulative_log_ratio = np.zeros([self.num_members], np.float64)

  @property
  def stages_done(self) -> int:
    return len(self.log_ratios)

  def resume_point(self, which: str) -> Optional[PartialEstimate]:
    """The partial sum of estimate `which`, if that estimate was under way."""
    return self.estimate if self.estimate_of == which else None

  def to_arrays(self) -> dict[str, np.ndarray]:
    arrays = {
        "num_members": np.array(self.num_members), "label": np.array(self.label),
        "cumulative_log_ratio": self.cumulative_log_ratio,
        "log_ratios": np.array(self.log_ratios, np.float64).reshape(-1, self.num_members),
        "stage_values": np.array(self.stage_values, np.float64).reshape(-1, self.num_members),
        "optimise_seconds": np.array(self.optimise_seconds, np.float64),
        "condition_seconds": np.array(self.condition_seconds, np.float64),
        "seconds": np.array([self.refine_seconds, self.stage_seconds, self.elapsed_seconds]),
        "estimate_of": np.array(self.estimate_of), "saves": np.array(self.saves)}
    for stage, trace in enumerate(self.traces):
      arrays[f"trace_{stage}"] = trace
    for name in ("initial_elbo", "stage_start"):
      if getattr(self, name) is not None:
        arrays[name] = getattr(self, name)
    if self.estimate is not None:
      arrays["estimate_batches_done"] = np.array(self.estimate.batches_done)
      arrays["estimate_summed"] = self.estimate.summed
    if self.final_terms is not None:
      arrays["final_expected_log_likelihood"] = self.final_terms.expected_log_likelihood
      arrays["final_kl"] = self.final_terms.kl
    return arrays

  @classmethod
  def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> RefinementProgress:
    stages = len(arrays["log_ratios"])
    refine_seconds, stage_seconds, elapsed_seconds = (float(x) for x in arrays["seconds"])
    progress = cls(
        num_members=int(arrays["num_members"]), label=str(arrays["label"]),
        initial_elbo=arrays.get("initial_elbo"), stage_start=arrays.get("stage_start"),
        cumulative_log_ratio=arrays["cumulative_log_ratio"],
        log_ratios=list(arrays["log_ratios"]), stage_values=list(arrays["stage_values"]),
        traces=[arrays[f"trace_{stage}"] for stage in range(stages) if f"trace_{stage}" in arrays],
        optimise_seconds=[float(x) for x in arrays["optimise_seconds"]],
        condition_seconds=[float(x) for x in arrays["condition_seconds"]],
        refine_seconds=refine_seconds, stage_seconds=stage_seconds,
        elapsed_seconds=elapsed_seconds, estimate_of=str(arrays["estimate_of"]),
        saves=int(arrays["saves"]))
    if "estimate_summed" in arrays:
      progress.estimate = PartialEstimate(int(arrays["estimate_batches_done"]),
                                          arrays["estimate_summed"])
    if "final_kl" in arrays:
      progress.final_terms = ElboTerms(arrays["final_expected_log_likelihood"], arrays["final_kl"])
    return progress


class RefinementCheckpoint:
  """Saves and restores a refinement's state in `directory` (see the module docstring).

  `state` is the trackable holding every variable the refinement changes (the `Refiner`);
  `arguments` are what shaped the refinement (JSON-serialisable), checked on restore;
  `after_save(label)` is called after every save (a caller can log there, or stop).
  Inside whole-dataset estimates a save is due every `checkpoint_seconds`; a multi-worker run,
  whose workers' clocks differ, saves only at the estimates' and stages' ends.
  """

  def __init__(self, state: tf.Module, directory: str, arguments: Mapping[str, Any], *,
               checkpoint_seconds: float = 600.0,
               after_save: Optional[Callable[[str], None]] = None,
               timed_saves: bool = True):
    if not checkpoint_seconds > 0:
      raise ValueError(f"checkpoint_seconds={checkpoint_seconds}; allowed: > 0")
    self.directory = directory
    self.arguments = json.loads(json.dumps(dict(arguments)))   # as a JSON round trip gives them
    self.checkpoint_seconds = float(checkpoint_seconds)
    self.after_save = after_save
    self.timed_saves = timed_saves
    self.checkpoint = tf.train.Checkpoint(refiner=state)
    self._last_save = time.perf_counter()

  def _progress_path(self, number: int) -> str:
    return os.path.join(self.directory, f"{_PROGRESS_PREFIX}{number}.npz")

  def restore(self) -> Optional[RefinementProgress]:
    """The saved progress, with the refiner's variables restored; None if nothing was saved.
    ValueError if the checkpoint was made by a refinement with other arguments."""
    latest = tf.train.latest_checkpoint(self.directory)
    if latest is None:
      return None
    number = int(latest.rsplit("-", 1)[1])
    with np.load(self._progress_path(number)) as saved:
      arrays = {name: saved[name] for name in saved.files}
    recorded = json.loads(str(arrays.pop("arguments")))
    differing = sorted(name for name in set(recorded) | set(self.arguments)
                       if recorded.get(name) != self.arguments.get(name))
    if differing:
      raise ValueError(
          f"the refinement checkpoint in {self.directory} was made with other arguments ("
          + "; ".join(f"{name}: {recorded.get(name)!r} there, {self.arguments.get(name)!r} now"
                      for name in differing)
          + "); use another directory, or delete it to refine afresh")
    self.checkpoint.restore(latest).assert_existing_objects_matched()
    self._last_save = time.perf_counter()
    return RefinementProgress.from_arrays(arrays)

  def due(self) -> bool:
    """Whether a save inside an estimate is due (`checkpoint_seconds` since the last)."""
    return self.timed_saves and (
        time.perf_counter() - self._last_save >= self.checkpoint_seconds)

  def save(self, progress: RefinementProgress, label: str) -> None:
    """Saves the refiner's variables and `progress`, which now stands at `label`."""
    progress.saves += 1
    progress.label = label
    number = progress.saves
    if not writes_run_files():
      # A --multi_worker run's other workers take part in the save into a folder of their own.
      with tempfile.TemporaryDirectory(prefix="worker_refinement_") as scratch:
        tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1).save(
            checkpoint_number=number)
    else:
      os.makedirs(self.directory, exist_ok=True)
      arrays = dict(progress.to_arrays(), arguments=np.array(json.dumps(self.arguments)))
      # The progress first: until the variables' checkpoint names this number, the previous
      # pair stands.
      with atomic_output(self._progress_path(number)) as temporary:
        with open(temporary, "wb") as handle:
          np.savez(handle, **arrays)
      tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=1).save(
          checkpoint_number=number)
      for name in os.listdir(self.directory):
        if name.startswith(_PROGRESS_PREFIX) and name != os.path.basename(
            self._progress_path(number)):
          os.remove(os.path.join(self.directory, name))
      logging.info("refinement checkpoint saved: %s", label)
    self._last_save = time.perf_counter()
    if self.after_save is not None:
      self.after_save(label)
