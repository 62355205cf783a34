"""Work run on a second thread while the main one trains, e.g. tracing and compiling a refiner.

TensorFlow releases the interpreter while a compiled training loop runs, so a second thread
can trace Python (a refiner's functions) and XLA can compile beside it. Tracing on both
threads at once only takes turns at the interpreter, so the work is started when asked
(`start`, e.g. after the training loop's first chunk has traced and compiled), not when made.
The thread runs under the maker's `tf.distribute` strategy and context variables (the
weight-noise mode, a draw plan), which are per thread, so it builds what the maker would have.
"""
from __future__ import annotations

import concurrent.futures
import contextvars
from typing import Callable, Generic, Optional, TypeVar

import tensorflow as tf

Result = TypeVar("Result")


class BackgroundWork(Generic[Result]):
  """`work()` on a second thread from the first `start()`; `result()` waits for it (starting it
  if nobody did) and raises what it raised. Used as a context manager, leaving the block waits
  for the thread, so nothing outlives the block; when the block raises, that waits for the work
  to finish too, and an error of the work itself is then not raised (the block's is)."""

  def __init__(self, work: Callable[[], Result]):
    self._work = work
    self._strategy = tf.distribute.get_strategy()
    self._context = contextvars.copy_context()
    self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
    self._future: Optional[concurrent.futures.Future] = None

  def _run_in_makers_context(self) -> Result:
    with self._strategy.scope():
      return self._context.run(self._work)

  def start(self) -> None:
    """Starts the work on its thread; later calls do nothing."""
    if self._future is None:
      self._executor = concurrent.futures.ThreadPoolExecutor(
          max_workers=1, thread_name_prefix="background")
      self._future = self._executor.submit(self._run_in_makers_context)

  def result(self) -> Result:
    """The work's result, once it has finished (started now if nobody started it)."""
    self.start()
    return self._future.result()

  def __enter__(self) -> "BackgroundWork[Result]":
    return self

  def __exit__(self, *exception_info) -> None:
    if self._executor is not None:
      self._executor.shutdown(wait=True)
