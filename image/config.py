"""Settings of the LeNet-5 binary (paper Table 2, Figure 4); the defaults are the paper's."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from runner.config import MEAN_FIELD, MethodConfig
from runner.image_config import ImageClassificationConfig
from common import images
from common.config import RESULTS, UsageError, setting, with_default
from methods import network_kinds, registry
from methods.registry import ENSEMBLE, EXTRA_VI, VI, VOGN

# LeNet-5 comes as mean-field, MNF and ensemble networks.
METHODS = registry.methods_for((network_kinds.MEAN_FIELD, network_kinds.MNF,
                                 network_kinds.ENSEMBLE))

ENSEMBLE_KERNEL_INITIALIZERS = ("he_normal", "glorot_uniform")
PIXEL_SCALINGS = ("by_method",) + images.PIXEL_SCALINGS


def pixel_scaling_for(method: str, pixel_scaling: str) -> str:
  """The pixel scaling a run uses; "by_method" follows the code behind each of the paper's rows.

  The deep ensemble's row is uncertainty-baselines' deterministic LeNet-5 (its
  README reports the paper's ensemble numbers), which feeds [0, 1] pixels; the
  VI family and MNF standardise per channel, as the authors' code does.
  """
  if pixel_scaling != "by_method":
    return pixel_scaling
  return "unit_interval" if method == "deep_ensemble" else "standardise"


@dataclasses.dataclass
class ImageConfig(ImageClassificationConfig, *registry.configs_of(METHODS)):
  """One dataset, one method, one seed of LeNet-5."""

  # The mean-field and ensemble LeNet-5s can compute in bfloat16 (not MNF's flows).
  bfloat16_supported: ClassVar[bool] = True

  method: str = setting("refined_vi", "Method to train and evaluate.", choices=METHODS,
                        shapes=RESULTS)
  pixel_scaling: str = setting(
      "by_method", "standardise: per channel with training statistics (the authors' VI code); "
      "unit_interval: [0, 1] pixels (uncertainty-baselines' deterministic LeNet-5, whose ensemble "
      "the paper reports); by_method: unit_interval for deep_ensemble, standardise otherwise.",
      # Every run recorded before this setting existed standardised its pixels.
      choices=PIXEL_SCALINGS, absent_means="standardise")
  ensemble_kernel_initializer: str = setting(
      "glorot_uniform",
      "deep_ensemble: initialiser of the ReLU layers' kernels (glorot_uniform: the Keras "
      "default uncertainty-baselines uses; he_normal: as the suite's other LeNet-5s).",
      choices=ENSEMBLE_KERNEL_INITIALIZERS, shapes=(ENSEMBLE,))
  initial_untransformed_posterior_scale: float = setting(
      -4.0,
      "VI family: the posterior scales start at softplus of this. -4 (0.018) lands VI within 2 "
      "paper std on MNIST and Fashion-MNIST (image/README.md); -7 (9e-4) is the authors' code.",
      minimum=-20.0, maximum=5.0, shapes=(VI, EXTRA_VI, VOGN),
      only_when=("method", MEAN_FIELD))
  # LeNet-5 steps take ~0.1 s here: 1,000 of them are a few minutes of work lost to a kill (the
  # ensemble's 5,000 steps of all members are about two hours), and a progress line as often.
  steps_per_checkpoint: int = with_default(MethodConfig, "steps_per_checkpoint", 1_000)

  def __post_init__(self):
    # Recorded resolved, so that a rerun compares the scaling a run really used.
    self.pixel_scaling = pixel_scaling_for(self.method, self.pixel_scaling)

  def check(self) -> None:
    super().check()
    if self.use_bfloat16 and self.method == "mnf":
      raise UsageError("--use_bfloat16 with --method=mnf: MNF's normalizing flows and their "
                       "log-determinants stay float32; allowed: --use_bfloat16=false for mnf")
