"""Dataset files from a local directory or a checksummed download cache.

Loaders look for a file in the user's directory first; otherwise they fetch it
from its published URL into a cache directory. Either way the file's sha256
must match the one the loader pins, so a truncated download or a different
version of the data is an error, never a silently different benchmark.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from typing import Optional

DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "refined_vi")


def sha256_of(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as handle:
    for block in iter(lambda: handle.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def verify(path: str, sha256: str) -> str:
  """Returns `path` if its sha256 is `sha256`, else raises OSError naming both digests."""
  actual = sha256_of(path)
  if actual != sha256:
    raise OSError(f"checksum mismatch for {path}: sha256 {actual}, expected {sha256}")
  return path


def _missing_folders(folder: str) -> list[str]:
  """`folder` and those of its parents that do not exist yet, deepest first."""
  missing = []
  folder = os.path.abspath(folder)
  while folder and not os.path.exists(folder):
    missing.append(folder)
    parent = os.path.dirname(folder)
    if parent == folder:
      break
    folder = parent
  return missing


def fetch(url: str, destination: str, sha256: str) -> str:
  """Downloads `url` to `destination` (atomically, verified) unless a verified copy is there.

  A failed download leaves nothing behind: neither a partial file nor the folders made for it.
  """
  if os.path.exists(destination):
    return verify(destination, sha256)
  folder = os.path.dirname(destination) or "."
  made = _missing_folders(folder)
  os.makedirs(folder, exist_ok=True)
  descriptor, temporary = tempfile.mkstemp(dir=folder, suffix=".part")
  try:
    with os.fdopen(descriptor, "wb") as handle, urllib.request.urlopen(url, timeout=60) as response:
      for block in iter(lambda: response.read(1 << 20), b""):
        handle.write(block)
    verify(temporary, sha256)
    os.replace(temporary, destination)
  except BaseException as error:
    if os.path.exists(temporary):
      os.remove(temporary)
    for made_folder in made:   # deepest first; a folder something else wrote into stays
      try:
        os.rmdir(made_folder)
      except OSError:
        break
    if isinstance(error, urllib.error.URLError):
      raise OSError(f"could not download {url} ({error.reason}); pass a local copy with "
                    "--data_dir") from error
    raise
  return destination


def locate(relative_path: str, sha256: str, url: str, data_dir: Optional[str] = None,
           cache_dir: Optional[str] = None, download: bool = True) -> str:
  """The verified local path of a dataset file.

  Looks in `data_dir` (if given), then in the cache; downloads into the cache
  when allowed. Raises OSError if the file is missing and cannot be fetched.
  """
  if data_dir:
    candidate = os.path.join(data_dir, relative_path)
    if os.path.exists(candidate):
      return verify(candidate, sha256)
  cached = os.path.join(cache_dir or DEFAULT_CACHE_DIR, relative_path)
  if os.path.exists(cached) or download:
    try:
      return fetch(url, cached, sha256)
    except OSError as error:
      if data_dir and not os.path.exists(cached):
        raise OSError(
            f"{os.path.join(data_dir, relative_path)} is missing and downloading failed: {error}"
        ) from error
      raise
  raise OSError(
      f"{relative_path} is not in {data_dir or 'the data directory'} and downloading is off")
