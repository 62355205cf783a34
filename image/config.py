"""Settings of the LeNet-5 binary (paper Table 2, Figure 4); the defaults are the paper's."""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from baselines.config import ENSEMBLE, EXTRA_VI, VI, MethodConfig
from common import images
from common.config import (NOTHING, RESULTS, UsageError, data_dir_setting, download_setting,
                           setting, with_default)

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
class ImageConfig(MethodConfig):
  """One dataset, one method, one seed."""

  # The mean-field and ensemble LeNet-5s can compute in bfloat16 (not MNF's flows).
  bfloat16_supported: ClassVar[bool] = True

  dataset: str = setting("mnist", "Image dataset.", choices=images.DATASETS)
  source: str = setting(
      "files", "Original files (local directory, cache or checksummed download) or "
      "tensorflow_datasets.", choices=images.SOURCES, shapes=NOTHING)
  data_dir: Optional[str] = data_dir_setting("<dir>/<dataset>/...", "$REFINED_VI_DATA_DIR")
  download: bool = download_setting()
  pixel_scaling: str = setting(
      "by_method", "standardise: per channel with training statistics (the authors' VI code); "
      "unit_interval: [0, 1] pixels (uncertainty-baselines' deterministic LeNet-5, whose ensemble "
      "the paper reports); by_method: unit_interval for deep_ensemble, standardise otherwise.",
      choices=PIXEL_SCALINGS)
  ensemble_kernel_initializer: str = setting(
      "glorot_uniform",
      "deep_ensemble: initialiser of the ReLU layers' kernels (glorot_uniform: the Keras "
      "default uncertainty-baselines uses; he_normal: as the suite's other LeNet-5s).",
      choices=ENSEMBLE_KERNEL_INITIALIZERS, shapes=(ENSEMBLE,))
  initial_untransformed_posterior_scale: float = setting(
      -4.0,
      "VI family: the posterior scales start at softplus of this. -4 (0.018) lands VI within 2 "
      "paper std on MNIST and Fashion-MNIST (image/README.md); -7 (9e-4) is the authors' code.",
      minimum=-20.0, maximum=5.0, shapes=(VI, EXTRA_VI))
  eval_batch_size: int = setting(500, "Test examples per evaluation batch.", minimum=1,
                                 shapes=RESULTS)
  num_train_examples: int = setting(0, "Training examples used (0: all; fewer for smoke runs).",
                                    minimum=0)
  num_test_examples: int = setting(0, "Test examples used (0: all).", minimum=0, shapes=RESULTS)
  # Per member: the 10 refined members give 10 draws in all.
  elbo_num_samples: int = with_default(MethodConfig, "elbo_num_samples", 1)
  # uncertainty-baselines' LeNet-5 ensemble, the paper's, has no adversarial training.
  adversarial_epsilon: float = with_default(MethodConfig, "adversarial_epsilon", 0.0)
  stage_elbo_aux: bool = with_default(MethodConfig, "stage_elbo_aux", True)

  def __post_init__(self):
    # Recorded resolved, so that a rerun compares the scaling a run really used.
    self.pixel_scaling = pixel_scaling_for(self.method, self.pixel_scaling)

  def check(self) -> None:
    super().check()
    if self.use_bfloat16 and self.method == "mnf":
      raise UsageError("--use_bfloat16 with --method=mnf: MNF's normalizing flows and their "
                       "log-determinants stay float32; allowed: --use_bfloat16=false for mnf")

  @property
  def resolved_data_dir(self) -> Optional[str]:
    return self.data_dir or images.default_data_dir()
