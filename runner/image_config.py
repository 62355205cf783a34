"""Settings every image-classification binary shares (LeNet-5, ResNet-20): data and evaluation.

No TensorFlow here: the binaries check flags before it loads.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from runner.config import MEAN_FIELD, MethodConfig
from common import images
from common.config import (NOTHING, RESULTS, data_dir_setting, download_setting, setting,
                           with_default)
from methods.deep_ensemble import EnsembleConfig
from methods.refined_vi import RefinementConfig
from methods.registry import EXTRA_VI, VI, VOGN
from methods.vi import MeanFieldConfig


@dataclasses.dataclass
class ImageClassificationConfig(MethodConfig):
  """One image dataset, one method, one seed; a binary adds its architecture's settings and
  those of the methods it offers (`methods.registry.configs_of`), after this class."""
  dataset: str = setting("mnist", "Image dataset.", choices=images.DATASETS)
  source: str = setting(
      "files", "Original files (local directory, cache or checksummed download) or "
      "tensorflow_datasets.", choices=images.SOURCES, shapes=NOTHING)
  data_dir: Optional[str] = data_dir_setting("<dir>/<dataset>/...", "$REFINED_VI_DATA_DIR")
  download: bool = download_setting()
  pixel_scaling: str = setting(
      "standardise", "standardise: per channel with training statistics (the authors' code); "
      "unit_interval: [0, 1] pixels.", choices=images.PIXEL_SCALINGS)
  initial_untransformed_posterior_scale: float = setting(
      -7.0, "VI family: the posterior scales start at softplus of this (-7: the authors' code).",
      minimum=-20.0, maximum=5.0, shapes=(VI, EXTRA_VI, VOGN),
      only_when=("method", MEAN_FIELD))
  data_augmentation: bool = setting(
      False, "Random rotations up to 90 degrees, shifts of 0.1 and horizontal flips of every "
      "training batch (the authors' ResNet option, off in their runs).")
  eval_batch_size: int = setting(500, "Test examples per evaluation batch.", minimum=1,
                                 shapes=RESULTS)
  num_train_examples: int = setting(0, "Training examples used (0: all; fewer for smoke runs).",
                                    minimum=0)
  num_test_examples: int = setting(0, "Test examples used (0: all).", minimum=0, shapes=RESULTS)
  # Per member: the 10 refined members give 10 draws in all.
  elbo_num_samples: int = with_default(MeanFieldConfig, "elbo_num_samples", 1)
  # The paper's image ensembles have no adversarial training.
  adversarial_epsilon: float = with_default(EnsembleConfig, "adversarial_epsilon", 0.0)
  stage_elbo_aux: bool = with_default(RefinementConfig, "stage_elbo_aux", True)

  @property
  def resolved_data_dir(self) -> Optional[str]:
    return self.data_dir or images.default_data_dir()

  def locate_data(self) -> None:
    images.locate_files(self.dataset, self.resolved_data_dir, self.download, self.source)
