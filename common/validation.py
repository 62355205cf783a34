"""Argument checks shared by the library, the trainers and seeding: every bad count fails with the
same one-line message. It lives at the bottom layer so that common/ can use it too."""
from __future__ import annotations

import numpy as np


def check_integer(name: str, value, minimum: int = 1) -> int:
  """`value` as an int if it is an integer (not a bool) >= `minimum`; else ValueError naming it."""
  is_integer = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
  if not is_integer or value < minimum:
    raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
  return int(value)
