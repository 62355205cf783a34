"""Settings of the UCI regression binary (paper Table 1); the defaults are the paper's."""
from __future__ import annotations

import dataclasses
from typing import Optional

from baselines.config import EXTRA_VI, MNF, VI, MethodConfig
from common.config import NOTHING, setting
from uci import data


@dataclasses.dataclass
class UciConfig(MethodConfig):
  """One dataset, one method, one seed."""

  dataset: str = setting("boston_housing", "UCI dataset (the paper's names).",
                         choices=sorted(data.DATASETS))
  split: str = setting(
      "random_80_20", "Split protocol: a random 80/20 split from the seed, or the standard "
      "90/10 splits of Gal & Ghahramani (split = seed).", choices=data.SPLITS)
  data_dir: Optional[str] = setting(
      None,
      "Local UCI directory (<dir>/<dataset>/data.txt); default $REFINED_VI_DATA_DIR/uci. Missing "
      "files are downloaded and checksummed.", shapes=NOTHING)
  download: bool = setting(True, "Download missing files (else a missing file is an error).",
                           shapes=NOTHING)
  hidden_units: int = setting(50, "ReLU units of the one hidden layer.", minimum=1)
  initial_noise_scale: float = setting(
      1.0, "Initial noise scale of the Gaussian likelihood (standardised units; learned as a point "
      "estimate).", above=1e-3, shapes=(VI, EXTRA_VI, MNF))

  @property
  def resolved_data_dir(self) -> Optional[str]:
    return self.data_dir or data.default_data_dir()
