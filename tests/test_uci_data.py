"""UCI loaders: checksums, local directories, downloads into the cache, splits, standardisation."""
import os
import shutil

import numpy as np
import pytest

from common import download
from uci import data


@pytest.mark.parametrize("name,rows,columns", [("boston_housing", 506, 13),
                                               ("naval_propulsion", 11934, 16),
                                               ("protein_structure", 45730, 9),
                                               ("yacht_hydrodynamics", 308, 6)])
def test_every_file_is_verified_and_shapes_match_the_literature(data_dir_for, name, rows,
                                                               columns):
  uci = os.path.join(data_dir_for(name), "uci")
  features, targets = data.load(name, uci, download_allowed=False)
  assert features.shape == (rows, columns) and targets.shape == (rows,)
  assert np.all(np.isfinite(features)) and np.all(np.isfinite(targets))
  expected_splits = 5 if name == "protein_structure" else 20
  assert data.num_standard_splits(name, uci, download_allowed=False) == expected_splits


def test_the_data_root_or_its_uci_folder_both_work(data_dir_for):
  root = data_dir_for("wine")
  a, _ = data.load("wine", root, download_allowed=False)
  b, _ = data.load("wine", os.path.join(root, "uci"), download_allowed=False)
  np.testing.assert_array_equal(a, b)


def test_a_corrupted_local_file_is_a_checksum_error(tmp_path, data_dir_for):
  shutil.copytree(os.path.join(data_dir_for("yacht_hydrodynamics"), "uci", "yacht_hydrodynamics"),
                  tmp_path / "yacht_hydrodynamics")
  with open(tmp_path / "yacht_hydrodynamics" / "data.txt", "a") as handle:
    handle.write("1 2 3 4 5 6 7\n")
  with pytest.raises(OSError, match="checksum mismatch .*yacht_hydrodynamics/data.txt"):
    data.load("yacht_hydrodynamics", str(tmp_path), download_allowed=False)


def test_missing_data_without_download_is_a_clear_error(tmp_path, monkeypatch):
  monkeypatch.setattr(download, "DEFAULT_CACHE_DIR", str(tmp_path / "cache"))
  with pytest.raises(OSError, match="downloading is off"):
    data.load("kin8nm", str(tmp_path), download_allowed=False)


def test_a_failed_download_leaves_no_empty_cache_folders(tmp_path):
  """Catches: offline, every failed first download leaving an empty ~/.cache/refined_vi/<dataset>
  folder behind (and a folder that already held files must stay)."""
  cache = tmp_path / "cache"
  with pytest.raises(OSError, match="could not download"):
    download.fetch("file://" + str(tmp_path / "absent.txt"), str(cache / "kin8nm" / "data.txt"),
                   "0" * 64)
  assert not cache.exists()
  (cache / "wine").mkdir(parents=True)
  (cache / "wine" / "other.txt").write_text("kept")
  with pytest.raises(OSError, match="could not download"):
    download.fetch("file://" + str(tmp_path / "absent.txt"), str(cache / "wine" / "a" / "b.txt"),
                   "0" * 64)
  assert sorted(os.listdir(cache / "wine")) == ["other.txt"]


def test_unknown_dataset_names_the_allowed_ones():
  with pytest.raises(
      ValueError, match="unknown UCI dataset 'boston'; allowed: boston_housing, concrete_strength"):
    data.load("boston")


def test_downloads_are_verified_and_cached_atomically(tmp_path, data_dir_for):
  """A file:// URL stands in for the network.

  The cache gets a verified copy, a bad one leaves nothing.
  """
  source = os.path.join(data_dir_for("yacht_hydrodynamics"), "uci", "yacht_hydrodynamics",
                        "data.txt")
  digest = data.DATASETS["yacht_hydrodynamics"].sha256["data.txt"]
  target = tmp_path / "cache" / "data.txt"
  download.fetch("file://" + source, str(target), digest)
  assert download.sha256_of(str(target)) == digest
  bad_target = tmp_path / "cache" / "other.txt"
  with pytest.raises(OSError, match="checksum mismatch"):
    download.fetch("file://" + source, str(bad_target), "0" * 64)
  assert sorted(os.listdir(tmp_path / "cache")) == ["data.txt"]
  with pytest.raises(OSError, match="could not download"):
    download.fetch("file://" + str(tmp_path / "absent.txt"), str(tmp_path / "x.txt"), digest)


def test_random_split_is_80_20_disjoint_and_seeded():
  train, test = data.split_indices(1000, "random_80_20", seed=3)
  assert len(train) == 800 and len(test) == 200 and not set(train) & set(test)
  again, _ = data.split_indices(1000, "random_80_20", seed=3)
  other, _ = data.split_indices(1000, "random_80_20", seed=4)
  np.testing.assert_array_equal(train, again)
  assert not np.array_equal(train, other)
  train, test = data.split_indices(1000, "standard_90_10", seed=19)
  assert len(train) == 900 and len(test) == 100
  with pytest.raises(ValueError, match="split number 20 is out of range; allowed: 0..19"):
    data.split_indices(1000, "standard_90_10", seed=20)


def test_standardisation_uses_training_statistics_only():
  rng = np.random.default_rng(0)
  features = np.column_stack([rng.normal(5, 3, 500), np.full(500, 7.0)])
  targets = 100 + 20 * rng.normal(size=500)
  split = data.prepare(features, targets, seed=1)
  np.testing.assert_allclose(split.x_train[:, 0].mean(), 0, atol=1e-5)
  np.testing.assert_allclose(split.x_train[:, 0].std(), 1, atol=1e-5)
  assert np.all(split.x_train[:, 1] == 0) and np.all(split.x_test[:, 1] == 0)   # constant column
  np.testing.assert_allclose(split.y_train.mean(), 0, atol=1e-5)
  np.testing.assert_allclose(split.target_mean + split.target_std * split.y_test,
                             split.y_test_original, rtol=1e-5)
  assert abs(split.x_test[:, 0].mean()) > 1e-4   # test rows are not re-standardised on themselves


def test_input_scaling_over_sqrt_dim_divides_every_feature_by_sqrt_of_their_number():
  """The f-POVI authors' preprocessing: inputs standardised, then divided by sqrt(D). Catches the
  scaling applied to the training rows only (the test rows must see the same transform) or
  to the targets."""
  rng = np.random.default_rng(0)
  features = rng.normal(5, 3, size=(400, 4))
  targets = rng.normal(size=400)
  unit = data.prepare(features, targets, seed=2)
  scaled = data.prepare(features, targets, seed=2, input_scaling="unit_over_sqrt_dim")
  np.testing.assert_allclose(scaled.x_train.std(0), 0.5, rtol=1e-5)
  np.testing.assert_allclose(scaled.x_train, unit.x_train / 2, rtol=1e-6)
  np.testing.assert_allclose(scaled.x_test, unit.x_test / 2, rtol=1e-6)
  np.testing.assert_array_equal(scaled.y_train, unit.y_train)
  with pytest.raises(ValueError, match="unknown input scaling 'sqrt'; allowed: unit, "):
    data.prepare(features, targets, input_scaling="sqrt")
