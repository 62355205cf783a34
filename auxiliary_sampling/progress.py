"""Progress lines of long runs through absl logging: step / total, steps per second, the current
objective, elapsed time and ETA; a long loop writes one about every PROGRESS_SECONDS."""
from __future__ import annotations

import time
from typing import Optional

from absl import logging

# Wall time between two progress lines of a long loop, whatever its checkpoint interval.
PROGRESS_SECONDS = 30.0


def format_duration(seconds: float) -> str:
  """3,725 s -> "1h02m", 185 s -> "3m05s", 12.3 s -> "12s"."""
  seconds = max(0, int(round(seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, seconds = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m"
  return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class ProgressLog:
  """Logs the progress of one loop of `total` steps that may resume at `start_step`.

  The rate (and so the ETA) is that of the steps since the previous line, so
  that the first chunk's tracing does not slow the estimate for the rest.
  """

  def __init__(self, what: str, total: int, start_step: int = 0, value_name: str = "ELBO"):
    self.what, self.total, self.value_name = what, int(total), value_name
    self.started = self.previous_time = time.perf_counter()
    self.previous_step = int(start_step)

  def line(self, step: int, value: Optional[float] = None, now: Optional[float] = None,
           stage: Optional[str] = None) -> str:
    """The progress line at `step` (within `stage`, if the loop has stages)."""
    now = time.perf_counter() if now is None else now
    elapsed, interval = now - self.started, now - self.previous_time
    done = step - self.previous_step
    self.previous_step, self.previous_time = step, now
    rate = done / interval if interval > 0 else float("inf")
    remaining = (self.total - step) / rate if done > 0 and rate > 0 else float("nan")
    where = f"{self.what}, {stage}" if stage else self.what
    percent = 100.0 * step / max(self.total, 1)
    parts = [f"{where}: step {step:,}/{self.total:,} ({percent:.0f}%)", f"{rate:.1f} steps/s"]
    if value is not None:
      parts.append(f"{self.value_name} {value:,.4g}")
    parts.append(f"elapsed {format_duration(elapsed)}")
    parts.append("ETA " + ("?" if remaining != remaining else format_duration(remaining)))
    return ", ".join(parts)

  def log(self, step: int, value: Optional[float] = None, stage: Optional[str] = None) -> None:
    logging.info(self.line(step, value, stage=stage))

  def due(self, seconds: float = PROGRESS_SECONDS) -> bool:
    """Whether `seconds` have passed since the previous line (or the start)."""
    return time.perf_counter() - self.previous_time >= seconds

  def log_every(self, step: int, seconds: float = PROGRESS_SECONDS) -> None:
    """Logs at `step` if `seconds` have passed since the previous line, and at the last step."""
    if step >= self.total or self.due(seconds):
      self.log(step)
