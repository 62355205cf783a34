"""refined_vogn: VOGN's mean-field posterior, then M refined samples (paper Algorithm 1)."""
from __future__ import annotations

import dataclasses

from methods import network_kinds
from methods.refined_vi import RefinementConfig
from methods.registry import VOGN, Method, MethodRun, TrainingInputs
from methods.vogn import VognConfig


@dataclasses.dataclass
class RefinedVognConfig(VognConfig, RefinementConfig):
  """Settings of refined VOGN: VOGN's and the refinement's."""


def train(run: TrainingInputs) -> MethodRun:
  """Fits VOGN (or resumes it), then refines M samples of it."""
  from methods.trainers.vi_family import REFINE, train_mean_field_method  # TensorFlow loads here
  return train_mean_field_method(run, fit=VOGN, then=REFINE)


METHOD = Method(
    name="refined_vogn", title="Refined VOGN", config=RefinedVognConfig,
    needs=(network_kinds.MEAN_FIELD,), train=train, order=7,
    summary="VOGN, then M refined samples", shares_training_with="vogn", refines=True,
    takes_input_transform=False, takes_penalty=False)
