"""TensorFlow started without its start-up noise, on the devices and threads the flags ask for.

TensorFlow's C++ start-up logging ignores log levels, so stderr is sent to /dev/null while it
loads; its INFO and WARNING logging (a line per checkpoint save) is dropped afterwards unless
--tf_log. The XLA cache, the thread count and a --multi_worker cluster must be set before its
devices start, so they are set here (`common.distribution` says how).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator, Optional

from absl import logging as absl_logging

from common.distribution import (multi_worker_strategy, set_thread_count, split_cpu_for_tests,
                                 use_xla_cache)


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
  """Sends file descriptor 2 to /dev/null.

  C++ logging before absl::InitializeLog ignores levels.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with open(os.devnull, "w") as devnull:
    os.dup2(devnull.fileno(), 2)
  try:
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)


def quiet_tensorflow_startup(show_logging: bool = False, intra_op_threads: int = 0,
                             xla_cache_dir: Optional[str] = None,
                             multi_worker: bool = False) -> None:
  """Imports TensorFlow (its XLA cache at `xla_cache_dir`, if given), sets its threads, joins the
  workers of $TF_CONFIG if `multi_worker` (before the devices start) and finds its devices,
  without its start-up noise on stderr.

  Also silences TensorFlow's INFO and WARNING logging (for example the checkpoint
  saver's per-save lines) unless `show_logging`.
  """
  if not show_logging:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if xla_cache_dir is not None:
    use_xla_cache(xla_cache_dir)
  with contextlib.nullcontext() if show_logging else stderr_silenced():
    import tensorflow as tf
    split_cpu_for_tests()
    set_thread_count(intra_op_threads)
    if multi_worker:
      multi_worker_strategy()
    tf.config.list_logical_devices()
  if show_logging:
    return
  tf.get_logger().setLevel("ERROR")
  absl_logging.get_absl_handler().addFilter(_drop_tensorflow_info)


def _drop_tensorflow_info(record: logging.LogRecord) -> bool:
  """Keeps our progress lines; drops TensorFlow's own INFO lines (e.g. one per checkpoint save)."""
  return record.levelno > logging.INFO or f"{os.sep}tensorflow{os.sep}" not in record.pathname
