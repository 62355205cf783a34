"""Test setup: legacy Keras before TensorFlow, quiet logs, every test seeded, one way to find the
benchmark data (`data_dir_for`), and the heaviest files first on parallel workers."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from bandits import mushroom  # noqa: E402
from common import download  # noqa: E402
from uci import data as uci_data  # noqa: E402

DATA_VARIABLE = "REFINED_VI_DATA_DIR"
_IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_UCI_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """Under --dist loadfile, the heaviest test files go out first (tests/scheduling.py)."""
  if config.getoption("dist") != "loadfile":
    return None
  from tests.scheduling import HeaviestFilesFirst
  return HeaviestFilesFirst(config, log)


@pytest.fixture(autouse=True)
def _seed_everything():
  random.seed(0)
  np.random.seed(0)
  tf.random.set_seed(0)
  yield


def dataset_files(dataset: str) -> list[str]:
  """The files the loaders read for `dataset`, relative to a data folder (the layout of the
  offline copies, which is also the download cache's)."""
  if dataset in ("mnist", "fashion_mnist"):
    return [os.path.join(dataset, name) for name in _IDX_FILES]
  if dataset == "mushroom":
    return [mushroom.RELATIVE_PATH]
  if dataset in uci_data.DATASETS:
    return [os.path.join("uci", dataset, name) for name in _UCI_FILES]
  raise ValueError(f"unknown dataset {dataset!r}; allowed: mnist, fashion_mnist, mushroom, "
                   f"{', '.join(sorted(uci_data.DATASETS))}")


def find_data_dir(dataset: str) -> str:
  """The folder holding `dataset`'s files: $REFINED_VI_DATA_DIR, else the loaders' download cache
  (filled by an earlier run of a binary with internet). Skips the calling test, naming the
  dataset and where it looked, when neither holds them: tests never download."""
  files = dataset_files(dataset)
  places = []
  if os.environ.get(DATA_VARIABLE):
    places.append((os.environ[DATA_VARIABLE], f"${DATA_VARIABLE}"))
  places.append((download.DEFAULT_CACHE_DIR, "the download cache"))
  for folder, _ in places:
    if all(os.path.isfile(os.path.join(folder, name)) for name in files):
      return folder
  looked = " nor ".join(f"{label} ({folder})" for folder, label in places)
  pytest.skip(f"needs the {dataset} data ({files[0]}), which is not in {looked}; set "
              f"${DATA_VARIABLE} to a folder laid out as the offline copies are")


@pytest.fixture(scope="session")
def data_dir_for():
  """`data_dir_for(dataset)` is the data folder to give a loader or binary (its `data_dir`) for
  `dataset` (mnist, fashion_mnist, mushroom or a UCI name), or skips the test; see
  `find_data_dir`. Session-scoped, so module-scoped fixtures can use it."""
  return find_data_dir


@pytest.fixture(scope="module")
def mushrooms(data_dir_for) -> mushroom.Mushrooms:
  """The mushroom data set (the bandit's), loaded once per test module."""
  return mushroom.load(data_dir_for("mushroom"), download_allowed=False)
