"""Image classification data: MNIST, Fashion-MNIST and CIFAR-10, standardised, in memory.

Sources, in order: a local directory (`<dir>/<name>/...` or the files directly
in `<dir>`), then the download cache, then the files' published URLs, every
file checked against its pinned sha256 (the digests TFDS pins for the same
URLs); or, with `source="tfds"`, `tensorflow_datasets`. MNIST and
Fashion-MNIST are the original gzipped IDX files; CIFAR-10 is the standard
`cifar-10-batches-bin` (binary) or `cifar-10-batches-py` (pickled) folder,
or the binary archive, which is downloaded and unpacked. A local CIFAR-10
folder has no published per-file digests, so its files are checked for the
format instead (binary batches: a whole number of records; pickled batches:
their keys and array shapes; both: the label range).

As in the authors' code, pixels are scaled to [0, 1] and standardised per
channel with the training set's mean and standard deviation; no augmentation.
`pixel_scaling="unit_interval"` keeps the [0, 1] pixels unstandardised, as
uncertainty-baselines' deterministic LeNet-5 (the paper's deep ensemble) does.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import tarfile
from typing import Optional

import numpy as np

from common import download

DATASETS = ("mnist", "fashion_mnist", "cifar10")
SOURCES = ("files", "tfds")
PIXEL_SCALINGS = ("standardise", "unit_interval")
NUM_CLASSES = 10

_IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_IDX_SOURCES = {
    "mnist": ("https://storage.googleapis.com/cvdf-datasets/mnist/", {
        "train-images-idx3-ubyte.gz":
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte.gz":
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "t10k-images-idx3-ubyte.gz":
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte.gz":
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    }),
    "fashion_mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/", {
        "train-images-idx3-ubyte.gz":
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "train-labels-idx1-ubyte.gz":
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "t10k-images-idx3-ubyte.gz":
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "t10k-labels-idx1-ubyte.gz":
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"
    }),
}
# Debian's dataset-fashion-mnist package installs the same four files here.
_SYSTEM_DIRS = {"fashion_mnist": "/usr/share/datasets/fashion-mnist"}
_CIFAR10_ARCHIVE = ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                    "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd")
_CIFAR10_BIN_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]
_CIFAR10_PY_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
_CIFAR10_RECORD_BYTES = 1 + 32 * 32 * 3


@dataclasses.dataclass
class ImageData:
  """Scaled images [N, H, W, C] float32 and integer labels [N].

  The images are standardised unless asked otherwise.
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  channel_mean: np.ndarray  # subtracted from the [0, 1]-scaled pixels, per channel
                            # (0 for "unit_interval")
  channel_std: np.ndarray    # then divided by (1 for "unit_interval")


def check_name(dataset: str) -> str:
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset {dataset!r}; allowed: {', '.join(DATASETS)}")
  return dataset


def default_data_dir() -> Optional[str]:
  root = os.environ.get("REFINED_VI_DATA_DIR")
  return root or None


def read_idx(path: str, expected_magic: int) -> np.ndarray:
  """An array from a gzipped IDX file (big-endian header: magic, then one uint32 per dimension)."""
  try:
    with gzip.open(path, "rb") as handle:
      content = handle.read()
  except (OSError, EOFError) as error:
    raise OSError(f"{path} is not a readable gzip file ({error})") from error
  magic = int.from_bytes(content[:4], "big") if len(content) >= 4 else None
  if magic != expected_magic:
    raise OSError(
        f"{path}: wrong magic number {magic if magic is None else hex(magic)}, expected "
        f"{hex(expected_magic)} (an IDX {'image' if expected_magic == 0x803 else 'label'} file)")
  rank = expected_magic & 0xFF
  shape = [int.from_bytes(content[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
  header = 4 + 4 * rank
  if len(content) != header + int(np.prod(shape)):
    raise OSError(f"{path}: {len(content) - header} data bytes, the header's shape {shape} needs "
                  f"{int(np.prod(shape))} (truncated or corrupt file)")
  return np.frombuffer(content, np.uint8, offset=header).reshape(shape)


def _idx_path(dataset: str, name: str, data_dir: Optional[str], cache_dir: Optional[str],
              download_allowed: bool):
  url, digests = _IDX_SOURCES[dataset]
  candidates = [os.path.join(data_dir, name),
                os.path.join(data_dir, dataset, name)] if data_dir else []
  if dataset in _SYSTEM_DIRS:
    candidates.append(os.path.join(_SYSTEM_DIRS[dataset], name))
  for candidate in candidates:
    if os.path.exists(candidate):
      return download.verify(candidate, digests[name])
  return download.locate(os.path.join(dataset, name), digests[name], url + name, data_dir,
                         cache_dir, download_allowed)


def _idx_paths(dataset, data_dir, cache_dir, download_allowed) -> list[str]:
  return [_idx_path(dataset, name, data_dir, cache_dir, download_allowed) for name in _IDX_FILES]


def _load_idx_dataset(dataset, data_dir, cache_dir, download_allowed):
  paths = _idx_paths(dataset, data_dir, cache_dir, download_allowed)
  arrays = [read_idx(path, 0x803 if "images" in path else 0x801) for path in paths]
  for images, labels, path in ((arrays[0], arrays[1], paths[1]), (arrays[2], arrays[3], paths[3])):
    if len(images) != len(labels):
      raise OSError(f"{path}: {len(labels)} labels for {len(images)} images")
  return arrays[0][..., None], arrays[1], arrays[2][..., None], arrays[3]


def _check_labels(labels: np.ndarray, path: str) -> np.ndarray:
  if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    raise OSError(f"{path}: labels outside 0..{NUM_CLASSES - 1}")
  return labels


def _read_cifar_bin(path: str) -> tuple[np.ndarray, np.ndarray]:
  """One `data_batch_*.bin`: records of 1 label byte + 3072 pixel bytes (channel-major 32x32)."""
  raw = np.fromfile(path, np.uint8)
  if raw.size == 0 or raw.size % _CIFAR10_RECORD_BYTES:
    raise OSError(
        f"{path}: {raw.size} bytes is not a whole number of {_CIFAR10_RECORD_BYTES}-byte CIFAR-10 "
        "records (truncated or not a CIFAR-10 binary batch)")
  records = raw.reshape(-1, _CIFAR10_RECORD_BYTES)
  images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return images, _check_labels(records[:, 0].astype(np.int64), path)


def _read_cifar_py(path: str) -> tuple[np.ndarray, np.ndarray]:
  """One pickled `data_batch_*`: {b'data': uint8 [N, 3072], b'labels': [N]}."""
  try:
    with open(path, "rb") as handle:
      batch = pickle.load(handle, encoding="bytes")
    data, labels = np.asarray(batch[b"data"], np.uint8), np.asarray(batch[b"labels"], np.int64)
  except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as error:
    raise OSError(
        f"{path} is not a CIFAR-10 python batch ({type(error).__name__}: {error})") from error
  if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
    raise OSError(
        f"{path}: data of shape {data.shape} with {len(labels)} labels; "
        "expected [N, 3072] and N labels"
    )
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), _check_labels(labels, path)


def _cifar_folder(data_dir: Optional[str]) -> Optional[tuple[str, str]]:
  """(folder, 'bin' | 'py') of a local CIFAR-10 copy, if any."""
  if not data_dir:
    return None
  for root in (os.path.join(data_dir, "cifar10"), data_dir):
    for kind in ("bin", "py"):
      folder = os.path.join(root, f"cifar-10-batches-{kind}")
      if os.path.isdir(folder):
        return folder, kind
  return None


def local_cifar10_folder(data_dir: Optional[str] = None,
                         cache_dir: Optional[str] = None) -> Optional[str]:
  """Where a CIFAR-10 copy already on this machine is (a batches folder under `data_dir`, default
  $REFINED_VI_DATA_DIR, or in the download cache, or the cached archive), or None: whether the
  paper's Table 3 runs without a download (`run_all.sh --scale=paper` asks)."""
  cache = os.path.join(cache_dir or download.DEFAULT_CACHE_DIR, "cifar10")
  for root in (data_dir or default_data_dir(), cache):
    found = _cifar_folder(root)
    if found is not None:
      return found[0]
  archive = os.path.join(cache, "cifar-10-binary.tar.gz")
  return archive if os.path.exists(archive) else None


def _cifar10_files(data_dir, cache_dir, download_allowed) -> tuple[list[str], str]:
  """The paths of a CIFAR-10 folder's batches (train..., test) and its kind ('bin' | 'py'): a
  folder under `data_dir`, else the cache's, else the archive extracted there (downloaded if
  allowed); OSError if a batch is missing."""
  found = _cifar_folder(data_dir)
  if found is None:
    cache = cache_dir or download.DEFAULT_CACHE_DIR
    found = _cifar_folder(os.path.join(cache, "cifar10"))
    if found is None:
      archive = download.locate(os.path.join("cifar10",
                                             "cifar-10-binary.tar.gz"), _CIFAR10_ARCHIVE[1],
                                _CIFAR10_ARCHIVE[0], None, cache_dir, download_allowed)
      with tarfile.open(archive) as tar:
        tar.extractall(os.path.dirname(archive), filter="data")
      found = _cifar_folder(os.path.join(cache, "cifar10"))
  folder, kind = found
  train_names, test_name = (_CIFAR10_BIN_TRAIN,
                            "test_batch.bin") if kind == "bin" else (_CIFAR10_PY_TRAIN,
                                                                     "test_batch")
  paths = [os.path.join(folder, name) for name in train_names + [test_name]]
  for path in paths:
    if not os.path.exists(path):
      raise OSError(
          f"{path} is missing (a CIFAR-10 folder needs {', '.join(train_names)} and {test_name})")
  return paths, kind


def _load_cifar10(data_dir, cache_dir, download_allowed):
  paths, kind = _cifar10_files(data_dir, cache_dir, download_allowed)
  reader = _read_cifar_bin if kind == "bin" else _read_cifar_py
  parts = [reader(path) for path in paths]
  x_train = np.concatenate([images for images, _ in parts[:-1]])
  y_train = np.concatenate([labels for _, labels in parts[:-1]])
  return x_train, y_train, parts[-1][0], parts[-1][1]


def _load_tfds(dataset: str, data_dir: Optional[str], download_allowed: bool):
  """Both splits through `tensorflow_datasets`; any failure of it (data not prepared, a failed
  download) becomes one OSError line naming the dataset and the folder."""
  import tensorflow_datasets as tfds  # imported on demand: slow, and only this source needs it
  arrays = []
  for split in ("train", "test"):
    try:
      images, labels = tfds.as_numpy(
          tfds.load(dataset, split=split, batch_size=-1, as_supervised=True, data_dir=data_dir,
                    download=download_allowed))
    except Exception as error:
      # tfds signals missing data with AssertionError, download failures variously
      reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
      raise OSError(f"tensorflow_datasets could not load {dataset} {split} from "
                    f"{data_dir or 'its default data_dir'} (download={download_allowed}): {reason}"
                   ) from error
    arrays += [images, labels.astype(np.int64)]
  return tuple(arrays)


# Pixels per bincount call in `channel_statistics` (bounds its int64 copy to 32 MB).
_COUNT_CHUNK = 1 << 22


def channel_statistics(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per-channel float32 mean and standard deviation of [..., C] uint8 pixels scaled as `load`
  scales them (float32 / 255), computed in float64 from each channel's 256 value counts.

  numpy's float64 mean and std of the scaled array give the same float32 values (checked on
  MNIST, Fashion-MNIST and 200 random subsets of each), but its std makes float64 copies of
  every pixel: 2-15 s of every MNIST run here, against 0.5-1 s for one pass over the bytes.
  """
  if pixels.dtype != np.uint8:
    raise ValueError(f"channel_statistics counts uint8 pixels, not {pixels.dtype}")
  levels = (np.arange(256).astype(np.float32) / 255.0).astype(np.float64)
  means, stds = [], []
  for channel in pixels.reshape(-1, pixels.shape[-1]).T:
    counts = np.zeros(256, np.int64)
    for start in range(0, len(channel), _COUNT_CHUNK):
      counts += np.bincount(channel[start:start + _COUNT_CHUNK], minlength=256)
    mean = counts @ levels / len(channel)
    means.append(mean)
    stds.append(np.sqrt(counts @ np.square(levels - mean) / len(channel)))
  return np.array(means, np.float32), np.array(stds, np.float32)


def standardise(train: np.ndarray, test: np.ndarray,
                statistics: Optional[tuple[np.ndarray, np.ndarray]] = None):
  """[0, 1]-scaled pixels standardised per channel with the training set's statistics
  (`statistics`: their (mean, std) if known, e.g. `channel_statistics` of the uint8 pixels)."""
  if statistics is None:
    mean = train.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)
    std = train.std(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)
  else:
    mean, std = statistics
  std = np.where(std > 0, std, 1.0).astype(np.float32)
  return (train - mean) / std, (test - mean) / std, mean, std


def _check_data_dir(dataset: str, data_dir: Optional[str], source: str) -> None:
  if source == "files" and data_dir and not os.path.isdir(data_dir):
    raise OSError(
        f"data_dir {data_dir} is not a folder (give a folder holding {dataset}/ or its files, "
        "or no data_dir to use the cache and downloads)")


def locate_files(dataset: str, data_dir: Optional[str] = None, download_allowed: bool = True,
                 source: str = "files", cache_dir: Optional[str] = None) -> list[str]:
  """The local paths of the files `load` reads (downloaded where missing and allowed; MNIST's
  and Fashion-MNIST's checksummed; CIFAR-10's archive extracted, its batches present, their
  sizes checked when read), or [] for tensorflow_datasets, which finds its own; OSError if one
  is missing or corrupt."""
  check_name(dataset)
  _check_data_dir(dataset, data_dir, source)
  if source == "tfds":
    return []
  if dataset == "cifar10":
    return _cifar10_files(data_dir, cache_dir, download_allowed)[0]
  return _idx_paths(dataset, data_dir, cache_dir, download_allowed)


def load(dataset: str, data_dir: Optional[str] = None, download_allowed: bool = True,
         source: str = "files", cache_dir: Optional[str] = None,
         pixel_scaling: str = "standardise") -> ImageData:
  """The train and test sets of `dataset`, standardised (or only [0, 1]-scaled: "unit_interval")."""
  check_name(dataset)
  if source not in SOURCES:
    raise ValueError(f"unknown source {source!r}; allowed: {', '.join(SOURCES)}")
  if pixel_scaling not in PIXEL_SCALINGS:
    raise ValueError(
        f"unknown pixel_scaling {pixel_scaling!r}; allowed: {', '.join(PIXEL_SCALINGS)}")
  _check_data_dir(dataset, data_dir, source)
  if source == "tfds":
    x_train, y_train, x_test, y_test = _load_tfds(dataset, data_dir, download_allowed)
  elif dataset == "cifar10":
    x_train, y_train, x_test, y_test = _load_cifar10(data_dir, cache_dir, download_allowed)
  else:
    x_train, y_train, x_test, y_test = _load_idx_dataset(dataset, data_dir, cache_dir,
                                                         download_allowed)
  train, test = x_train.astype(np.float32) / 255.0, x_test.astype(np.float32) / 255.0
  if pixel_scaling == "unit_interval":
    mean, std = np.zeros(train.shape[-1], np.float32), np.ones(train.shape[-1], np.float32)
  else:
    statistics = channel_statistics(x_train) if x_train.dtype == np.uint8 else None
    train, test, mean, std = standardise(train, test, statistics)
  return ImageData(train, y_train.astype(np.int32), test, y_test.astype(np.int32), mean, std)


def input_pipeline(images: np.ndarray, labels: np.ndarray, batch_size: int, *,
                   shuffle: bool = False, seed: int = 0, repeat: bool = False) -> "tf.data.Dataset":
  """A tf.data pipeline over in-memory arrays: (shuffle,) batch, prefetch.

  Evaluation uses it unshuffled. The shuffled, repeating form is for training
  loops that consume a tf.data iterator; the suite's own loops draw minibatches
  in-graph instead (`TrainingLoop`), which keeps resumed runs exact.
  """
  import tensorflow as tf  # on demand: the binaries check their flags before TensorFlow loads
  dataset = tf.data.Dataset.from_tensor_slices((images, labels))
  if shuffle:
    dataset = dataset.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
  if repeat:
    dataset = dataset.repeat()
  return dataset.batch(batch_size, drop_remainder=repeat).prefetch(tf.data.AUTOTUNE)


def write_cifar10(directory: str, batches, kind: str = "bin") -> str:
  """Writes CIFAR-10 batches in the real on-disk format, for tests and smoke runs without the data.

  `batches`: six (uint8 images [N, 32, 32, 3], labels [N]) pairs, the five
  training batches then the test batch; `kind`: 'bin' (records of a label byte
  and 3,072 channel-major pixel bytes) or 'py' (pickled dicts). Returns the
  folder, `<directory>/cifar-10-batches-<kind>`.
  """
  if kind not in ("bin", "py") or len(batches) != 6:
    raise ValueError(
        f"kind={kind!r} must be 'bin' or 'py' and there must be 6 batches, got {len(batches)}")
  folder = os.path.join(directory, f"cifar-10-batches-{kind}")
  os.makedirs(folder, exist_ok=True)
  for name, (pictures, labels) in zip(_CIFAR10_PY_TRAIN + ["test_batch"], batches):
    labels = np.asarray(labels)
    channel_major = np.asarray(pictures, np.uint8).transpose(0, 3, 1, 2).reshape(len(labels), -1)
    if kind == "bin":
      records = np.concatenate([labels[:, None].astype(np.uint8), channel_major], axis=1)
      records.tofile(os.path.join(folder, f"{name}.bin"))
    else:
      with open(os.path.join(folder, name), "wb") as handle:
        pickle.dump({b"data": channel_major, b"labels": labels.tolist()}, handle)
  return folder


def write_synthetic_cifar10(directory: str, examples_per_batch: int = 200, seed: int = 0,
                            kind: str = "bin") -> str:
  """Random CIFAR-10-format files whose labels are learnable.

  The class sets the mean colour of the image.
  """
  rng = np.random.default_rng(seed)
  batches = []
  for _ in range(6):
    labels = rng.integers(0, NUM_CLASSES, size=examples_per_batch)
    colours = np.stack([labels * 25, 255 - labels * 25, (labels * 70) % 256], axis=1)[:, None,
                                                                                      None, :]
    noise = rng.normal(0, 40, size=(examples_per_batch, 32, 32, 3))
    batches.append((np.clip(colours + noise, 0, 255).astype(np.uint8), labels))
  return write_cifar10(directory, batches, kind)
