"""methods.trainers.background: work on a second thread, under its maker's strategy and context."""
import threading

import pytest
import tensorflow as tf

from auxiliary_sampling.weight_noise import resolve_weight_noise, weight_noise_scope
from methods.trainers.background import BackgroundWork


def test_the_work_runs_under_its_makers_context_and_strategy():
  """The layers' weight-noise mode is a context variable and a strategy's scope is per thread: a
  new thread has neither. Catches work run outside its maker's context (planted:
  `self._work()` instead of `self._context.run(self._work)` returns the default mode; fails),
  which would trace a refiner's loop with other draws than the run's."""
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with weight_noise_scope("per_batch"), strategy.scope():
    work = BackgroundWork(lambda: (resolve_weight_noise(None), tf.distribute.get_strategy(),
                                   threading.current_thread()))
  with work:
    seen_mode, seen_strategy, thread = work.result()
  assert seen_mode == "per_batch"
  assert seen_strategy is strategy
  assert thread is not threading.current_thread()


def test_the_work_waits_for_start_runs_once_and_raises_what_it_raised():
  calls = []
  started = threading.Event()

  def work():
    calls.append(1)
    started.set()
    raise ValueError("the work's own error")

  with pytest.raises(ValueError, match="the work's own error"):
    with BackgroundWork(work) as background:
      assert not started.wait(0.2)   # made, not started
      background.start()
      background.start()
      background.result()
  assert calls == [1]


def test_leaving_the_block_waits_for_the_work():
  finished = []
  with BackgroundWork(lambda: finished.append(threading.Event().wait(0.3))) as background:
    background.start()
  assert finished == [False]
