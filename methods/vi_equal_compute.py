"""vi_equal_compute: VI trained further for the M * K * T Adam steps refinement spends.

The fair-compute baseline of refined_vi: it takes refinement's settings to count that budget.
"""
from __future__ import annotations

import dataclasses

from common.config import RESULTS, setting
from methods import network_kinds
from methods.refined_vi import RefinementConfig
from methods.registry import VI, Method, MethodRun, TrainingInputs
from methods.vi import ViConfig


@dataclasses.dataclass
class EqualComputeConfig(ViConfig, RefinementConfig):
  """Settings of VI with refinement's compute: VI's, the refinement's budget, the extra steps."""

  equal_compute_steps: int = setting(
      -1, "vi_equal_compute: extra VI steps; -1 means M * K * T, the Adam steps refinement spends.",
      minimum=-1, shapes=RESULTS)

  @property
  def extra_vi_steps(self) -> int:
    """vi_equal_compute's further VI steps: M * K * T unless set."""
    if self.equal_compute_steps >= 0:
      return self.equal_compute_steps
    return self.num_samples * self.num_auxiliary * self.steps_per_auxiliary


def train(run: TrainingInputs) -> MethodRun:
  """Fits VI (or resumes it), then trains it further for refinement's steps."""
  # TensorFlow loads here.
  from methods.trainers.vi_family import TRAIN_FURTHER, train_mean_field_method
  return train_mean_field_method(run, fit=VI, then=TRAIN_FURTHER)


METHOD = Method(
    name="vi_equal_compute", title="VI (equal compute)", config=EqualComputeConfig,
    needs=(network_kinds.MEAN_FIELD,), train=train, order=3,
    summary="VI trained further for refinement's M * K * T steps", shares_training_with="vi")
