"""Image loaders: real MNIST / Fashion-MNIST files, CIFAR-10 in both on-disk formats, bad files."""
import gzip
import hashlib
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest

from common import images


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_datasets_load_verified_and_standardised(data_dir_for, name):
  root = data_dir_for(name)
  data = images.load(name, root, download_allowed=False)
  assert data.x_train.shape == (60000, 28, 28, 1) and data.x_test.shape == (10000, 28, 28, 1)
  assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
  np.testing.assert_array_equal(
      np.bincount(data.y_test),
      np.full(10, 1000)
      if name == "fashion_mnist" else [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
  assert abs(data.x_train.mean()) < 1e-4 and abs(data.x_train.std() - 1) < 1e-4
  assert 0.05 < data.channel_mean[0] < 0.4 and 0.25 < data.channel_std[0] < 0.4
  # The folder itself works as --data_dir too.
  again = images.load(name, os.path.join(root, name), download_allowed=False)
  np.testing.assert_array_equal(again.y_train, data.y_train)
  # [0, 1] pixels: the standardised ones with the standardisation undone, and identity statistics.
  unit = images.load(name, root, download_allowed=False, pixel_scaling="unit_interval")
  assert unit.x_train.min() == 0 and unit.x_train.max() == 1 and unit.x_test.dtype == np.float32
  np.testing.assert_allclose(unit.x_test, data.x_test * data.channel_std + data.channel_mean,
                             atol=2e-6)
  assert unit.channel_mean[0] == 0 and unit.channel_std[0] == 1


def _copy_mnist(tmp_path, data_dir):
  target = tmp_path / "mnist"
  shutil.copytree(os.path.join(data_dir, "mnist"), target)
  for path in target.iterdir():
    path.chmod(0o644)
  return target


def test_a_corrupt_or_missing_file_names_the_file(tmp_path, data_dir_for):
  folder = _copy_mnist(tmp_path, data_dir_for("mnist"))
  with open(folder / "t10k-labels-idx1-ubyte.gz", "ab") as handle:
    handle.write(b"\0")
  with pytest.raises(OSError, match="checksum mismatch for .*t10k-labels-idx1-ubyte.gz"):
    images.load("mnist", str(tmp_path), download_allowed=False, cache_dir=str(tmp_path / "cache"))
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  with pytest.raises(OSError, match="t10k-labels-idx1-ubyte.gz is not in"):
    images.load("mnist", str(tmp_path), download_allowed=False, cache_dir=str(tmp_path / "cache"))


def test_a_data_dir_that_is_not_a_folder_is_an_error_not_a_silent_download(tmp_path):
  with pytest.raises(OSError, match=f"data_dir {tmp_path / 'typo'} is not a folder"):
    images.load("mnist", str(tmp_path / "typo"), download_allowed=True,
                cache_dir=str(tmp_path / "cache"))
  assert not (tmp_path / "cache").exists()


def test_tfds_without_prepared_data_is_one_error_line(tmp_path):
  with pytest.raises(OSError) as error:
    images.load("mnist", str(tmp_path), download_allowed=False, source="tfds")
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(
      f"tensorflow_datasets could not load mnist train from {tmp_path} (download=False): ")
  assert "could not find data" in message


def _gzip(path, payload: bytes):
  with gzip.open(path, "wb") as handle:
    handle.write(payload)


def test_idx_reader_checks_magic_number_and_size(tmp_path):
  pixels = np.arange(2 * 3 * 4, dtype=np.uint8)
  header = (0x803).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (2, 3, 4))
  _gzip(tmp_path / "good.gz", header + pixels.tobytes())
  np.testing.assert_array_equal(images.read_idx(str(tmp_path / "good.gz"), 0x803),
                                pixels.reshape(2, 3, 4))
  _gzip(tmp_path / "bad.gz", header + pixels.tobytes())
  with pytest.raises(OSError, match=r"bad.gz: wrong magic number 0x803, expected 0x801"):
    images.read_idx(str(tmp_path / "bad.gz"), 0x801)
  _gzip(tmp_path / "short.gz", header + pixels.tobytes()[:-1])
  with pytest.raises(OSError, match="short.gz: 23 data bytes, the header's shape"):
    images.read_idx(str(tmp_path / "short.gz"), 0x803)
  (tmp_path / "plain.gz").write_bytes(b"not gzip")
  with pytest.raises(OSError, match="plain.gz is not a readable gzip file"):
    images.read_idx(str(tmp_path / "plain.gz"), 0x803)


def _cifar_batch(rng, count):
  """uint8 images [count, 32, 32, 3] and labels.

  The channels have distinct constant offsets, to check the layout.
  """
  pictures = rng.integers(0, 50, size=(count, 32, 32, 3), dtype=np.uint8) + np.array([0, 100, 200],
                                                                                     np.uint8)
  return pictures, rng.integers(0, 10, size=count)


def _write_cifar(root, kind, batches):
  return images.write_cifar10(str(root), batches, kind)


@pytest.mark.parametrize("kind", ["bin", "py"])
def test_cifar10_folders_in_both_formats(tmp_path, kind):
  rng = np.random.default_rng(0)
  batches = [_cifar_batch(rng, 4) for _ in range(6)]
  _write_cifar(tmp_path / "cifar10", kind, batches)
  data = images.load("cifar10", str(tmp_path), download_allowed=False)
  assert data.x_train.shape == (20, 32, 32, 3) and data.x_test.shape == (4, 32, 32, 3)
  np.testing.assert_array_equal(data.y_train, np.concatenate([labels for _, labels in batches[:5]]))
  raw_train = np.concatenate([pictures for pictures, _ in batches[:5]]).astype(np.float64) / 255
  np.testing.assert_allclose(data.channel_mean, raw_train.mean(axis=(0, 1, 2)), rtol=1e-5)
  expected_test = (batches[5][0] / 255 - raw_train.mean(axis=(0, 1, 2))) / raw_train.std(axis=(0, 1,
                                                                                               2))
  np.testing.assert_allclose(data.x_test, expected_test, rtol=1e-4, atol=1e-4)


def test_cifar10_bad_folders_name_the_file(tmp_path):
  rng = np.random.default_rng(1)
  folder = tmp_path / "cifar-10-batches-bin"
  _write_cifar(tmp_path, "bin", [_cifar_batch(rng, 2) for _ in range(6)])
  with open(folder / "data_batch_3.bin", "ab") as handle:
    handle.write(b"\1\2")
  with pytest.raises(OSError,
                     match="data_batch_3.bin: 6148 bytes is not a whole number of 3073-byte"):
    images.load("cifar10", str(tmp_path), download_allowed=False)
  (folder / "data_batch_3.bin").unlink()
  with pytest.raises(OSError, match="data_batch_3.bin is missing"):
    images.load("cifar10", str(tmp_path), download_allowed=False)
  py_root = tmp_path / "py"
  py_folder = _write_cifar(py_root, "py", [_cifar_batch(rng, 2) for _ in range(6)])
  with open(os.path.join(py_folder, "test_batch"), "wb") as handle:
    handle.write(b"garbage")
  with pytest.raises(OSError, match="test_batch is not a CIFAR-10 python batch"):
    images.load("cifar10", str(py_root), download_allowed=False)


def test_cifar10_archive_is_downloaded_verified_and_unpacked(tmp_path, monkeypatch):
  """A file:// URL stands in for the network."""
  rng = np.random.default_rng(2)
  batches = [_cifar_batch(rng, 3) for _ in range(6)]
  _write_cifar(tmp_path / "src", "bin", batches)
  archive = tmp_path / "cifar-10-binary.tar.gz"
  with tarfile.open(archive, "w:gz") as tar:
    tar.add(tmp_path / "src" / "cifar-10-batches-bin", arcname="cifar-10-batches-bin")
  digest = hashlib.sha256(archive.read_bytes()).hexdigest()
  monkeypatch.setattr(images, "_CIFAR10_ARCHIVE", ("file://" + str(archive), digest))
  cache = tmp_path / "cache"
  data = images.load("cifar10", None, cache_dir=str(cache))
  assert data.x_train.shape == (15, 32, 32, 3)
  assert (cache / "cifar10" / "cifar-10-batches-bin" / "test_batch.bin").exists()
  monkeypatch.setattr(images, "_CIFAR10_ARCHIVE", ("file://" + str(archive), "0" * 64))
  with pytest.raises(OSError, match="checksum mismatch"):
    images.load("cifar10", None, cache_dir=str(tmp_path / "other_cache"))


def test_unknown_names_are_usage_errors():
  with pytest.raises(ValueError,
                     match="unknown dataset 'svhn'; allowed: mnist, fashion_mnist, cifar10"):
    images.load("svhn")
  with pytest.raises(ValueError, match="unknown source 'web'; allowed: files, tfds"):
    images.load("mnist", source="web")
  with pytest.raises(ValueError,
                     match="unknown pixel_scaling 'zscore'; allowed: standardise, unit_interval"):
    images.load("mnist", pixel_scaling="zscore")


def test_input_pipeline_batches_in_order_or_reshuffles_each_epoch():
  x = np.arange(10, dtype=np.float32)[:, None]
  y = np.arange(10)
  ordered = [labels.numpy().tolist() for _, labels in images.input_pipeline(x, y, 4)]
  assert ordered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
  shuffled = images.input_pipeline(x, y, 5, shuffle=True, seed=0, repeat=True)
  epochs = [
      np.concatenate([labels.numpy()
                      for _, labels in shuffled.skip(2 * e).take(2)])
      for e in range(2)
  ]
  for epoch in epochs:
    assert sorted(epoch.tolist()) == list(range(10))
  assert epochs[0].tolist() != list(range(10))


def test_a_python_batch_without_the_expected_keys_is_a_format_error(tmp_path):
  path = tmp_path / "data_batch_1"
  path.write_bytes(pickle.dumps({b"pixels": []}))
  with pytest.raises(OSError, match="data_batch_1 is not a CIFAR-10 python batch"):
    images._read_cifar_py(str(path))


def test_locate_files_names_what_load_reads(tmp_path, data_dir_for):
  """The files a binary checks before TensorFlow loads (`Config.locate_data`) are those `load`
  reads: MNIST's four, a CIFAR-10 folder's six batches; tensorflow_datasets finds its own."""
  data_dir = data_dir_for("fashion_mnist")
  paths = images.locate_files("fashion_mnist", data_dir, download_allowed=False)
  assert [os.path.basename(p) for p in paths] == list(images._IDX_FILES)
  folder = images.write_synthetic_cifar10(str(tmp_path / "cifar10"), examples_per_batch=2)
  paths = images.locate_files("cifar10", str(tmp_path), download_allowed=False)
  assert [os.path.dirname(p) for p in paths] == [folder] * 6
  assert images.locate_files("mnist", None, download_allowed=False, source="tfds") == []
  os.remove(paths[3])
  with pytest.raises(OSError, match="data_batch_4.bin is missing"):
    images.locate_files("cifar10", str(tmp_path), download_allowed=False)
