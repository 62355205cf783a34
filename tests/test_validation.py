"""check_integer (common/validation.py): the one check behind every count argument."""
import numpy as np
import pytest

from common.validation import check_integer


def test_integers_at_or_above_the_minimum_pass_as_python_ints():
  assert check_integer("units", 3) == 3
  assert check_integer("steps", 0, minimum=0) == 0
  value = check_integer("num_samples", np.int64(4))
  assert value == 4 and type(value) is int


@pytest.mark.parametrize("value", [0, -2, True, 2.0, "3", None, np.bool_(True)])
def test_everything_else_is_one_clear_error(value):
  """Mutation: dropping the bool test lets True through as 1."""
  with pytest.raises(ValueError, match=rf"^num_members={value!r} must be an integer >= 1$"):
    check_integer("num_members", value)
