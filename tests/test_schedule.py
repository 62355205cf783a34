import math
from fractions import Fraction

import numpy as np
import pytest

from auxiliary_sampling.schedule import AuxiliarySchedule


def test_geometric_matches_paper_series():
  # Workshop paper: 0.7, 0.21, 0.063, 0.0189 of sigma_w^2 for ratio 0.7.
  schedule = AuxiliarySchedule.geometric(0.7, 5)
  assert schedule.variance_fractions[:4] == pytest.approx([0.7, 0.21, 0.063, 0.0189])
  assert schedule.remaining_fraction(5) == pytest.approx(0.3**5)
  for k in range(1, 6):  # sigma_ak^2 = ratio * (sigma_w^2 - sum_{l<k} sigma_al^2)
    assert schedule.variance_fractions[k - 1] == pytest.approx(0.7 *
                                                               schedule.remaining_fraction(k - 1))


def test_paper_learning_rate_rule():
  rates = AuxiliarySchedule.geometric(0.7, 5).learning_rates("paper")
  assert rates == pytest.approx([1e-3 * 0.3 ** (k / 2) for k in range(1, 6)])


@pytest.mark.parametrize("schedule", [
    AuxiliarySchedule.geometric(0.7, 5), AuxiliarySchedule.geometric(0.5, 10),
    AuxiliarySchedule.geometric(0.99, 5), AuxiliarySchedule.geometric(0.999, 3),
    AuxiliarySchedule.explicit([0.8]), AuxiliarySchedule.explicit([0.3, 0.2, 0.1])])
def test_paper_learning_rates_are_bit_identical_to_the_committed_runs(schedule):
  """The paper rule, 1e-3 * sqrt(1 - sum_{l<=k} sigma_al^2 / sigma_w^2) in float64, is kept bit for
  bit, so the committed runs' learning rates stay exactly reproducible.

  Mutation caught: deriving the rates from the exact product remainders (1 - r)^k instead, which
  moves them in the last bit (at k = 2..5 for r = 0.7).
  """
  fractions = schedule.variance_fractions
  committed = [1e-3 * math.sqrt(1.0 - sum(fractions[:k])) for k in range(1, len(fractions) + 1)]
  assert schedule.learning_rates("paper") == committed


def test_authors_code_learning_rate_is_their_rate_after_drawing_each_auxiliary():
  """google/edward2 experimental/auxiliary_sampling/run_training.py draws a_{j+1} (j = 0..K-1) and
  then compiles Adam with 1e-5 * sqrt(1 - ratio)**j: stage k uses 1e-5 * sqrt(1 - ratio)^(k-1),
  the scale of the prior a_k was drawn from.

  Mutation/bug caught: the old rule used the scale after a_k (exponent k), a factor sqrt(1 - r)
  too small at every stage: 5.48e-6, 3.0e-6, ... instead of 1e-5, 5.48e-6, ... for r = 0.7.
  """
  rates = AuxiliarySchedule.geometric(0.7, 5).learning_rates("authors_code")
  assert rates[0] == 1e-5
  assert rates == pytest.approx([1e-5 * math.sqrt(0.3) ** j for j in range(5)], rel=1e-12)
  assert rates[:3] == pytest.approx([1e-5, 5.477e-6, 3.0e-6], rel=1e-3)
  resnet = AuxiliarySchedule.geometric(0.5, 10).learning_rates("authors_code")
  assert resnet == pytest.approx([1e-5 * math.sqrt(0.5) ** j for j in range(10)], rel=1e-12)


def test_explicit_schedule():
  schedule = AuxiliarySchedule.explicit([0.8])
  assert schedule.num_auxiliary == 1 and schedule.remaining_fraction(1) == pytest.approx(0.2)


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_ratio_outside_unit_interval_is_rejected(ratio):
  with pytest.raises(ValueError, match="ratio"):
    AuxiliarySchedule.geometric(ratio, 5)


@pytest.mark.parametrize("count", [0, -1, 2.5, True])
def test_bad_number_of_auxiliary_variables_is_rejected(count):
  with pytest.raises(ValueError, match="K="):
    AuxiliarySchedule.geometric(0.7, count)


@pytest.mark.parametrize("fractions,match", [([], "K >= 1"), ([0.6, 0.5], "sum below 1"),
                                             ([1.0], "sum below 1"), ([0.2, -0.1], "> 0")])
def test_invalid_explicit_schedules_are_rejected(fractions, match):
  with pytest.raises(ValueError, match=match):
    AuxiliarySchedule.explicit(fractions)


def test_unknown_learning_rate_rule_names_the_allowed_ones():
  with pytest.raises(ValueError, match="'fast'.*paper, authors_code"):
    AuxiliarySchedule.geometric(0.7, 5).learning_rates("fast")


@pytest.mark.parametrize("ratio,num_auxiliary", [(0.7, 5), (0.9, 5), (0.99, 5), (0.999, 3)])
def test_geometric_remainders_are_the_exact_products(ratio, num_auxiliary):
  """After k auxiliaries of a geometric schedule (Section 4.1) p(w | a_1..k) keeps (1 - r)^k of
  sigma_w^2, which a product gives to float64 round-off.

  Mutation/bug caught: 1 - sum_{l<=k} sigma_al^2 / sigma_w^2, whose cancellation is 1.7e-14
  relative at r = 0.7 and 8e-8 at r = 0.99 and 0.999, already an ulp of float32.
  """
  schedule = AuxiliarySchedule.geometric(ratio, num_auxiliary)
  for k in range(num_auxiliary + 1):
    exact = float((1 - Fraction(ratio))**k)
    assert schedule.remaining_fraction(k) == pytest.approx(exact, rel=1e-15, abs=0), k


def test_explicit_remainders_are_rounded_once_in_float64():
  """Mutation/bug caught: the float64 1 - sum(...) is 8e-8 relative off for these fractions."""
  fractions = AuxiliarySchedule.geometric(0.999, 3).variance_fractions
  schedule = AuxiliarySchedule.explicit(fractions)
  for k in range(4):
    exact = float(1 - sum(Fraction(f) for f in fractions[:k]))
    assert schedule.remaining_fraction(k) == exact, k


@pytest.mark.parametrize("make,match", [
    (lambda: AuxiliarySchedule.geometric(1 - 1e-9, 2),
     r"^auxiliary variance ratio 0\.999999999 with K=2: fraction 0\.999999999 \(k=1\) rounds "
     r"to the remaining fraction 1 it is taken from in float32.*allowed: "),
    (lambda: AuxiliarySchedule.geometric(0.999, 13),
     r"^auxiliary variance ratio 0\.999 with K=13: the remaining fraction 1e-39 after k=13 is "
     r"below float32's smallest normal number 1\.18e-38.*allowed: "),
    (lambda: AuxiliarySchedule.explicit([1e-40, 0.5]),
     r"^auxiliary variance fractions \[1e-40, 0\.5\]: fraction 1e-40 \(k=1\) is below "
     r"float32's smallest normal number.*allowed: ")],
    ids=["fraction_rounds_to_remainder", "remainder_underflows", "fraction_underflows"])
def test_schedule_that_float32_cannot_hold_is_one_clear_value_error(make, match):
  """Such schedules are valid in float64, so only the model's float type can reject them.

  Mutation/bug caught: the old code had no such check (they went on to fail inside the model with
  a multi-line InvalidArgumentError, see test_refine), and its float64 sum rounded the first
  schedule's 1 - 1e-18 to 1, rejecting it even for a float64 model.
  """
  schedule = make()
  with pytest.raises(ValueError, match=match) as error:
    schedule.check_dtype(np.float32)
  assert "\n" not in str(error.value)
  schedule.check_dtype(np.float64)


def test_geometric_schedule_knows_its_ratio():
  assert AuxiliarySchedule.geometric(0.7, 5).ratio == 0.7
  assert AuxiliarySchedule.explicit([0.8]).ratio is None
  with pytest.raises(ValueError, match="not the geometric series of ratio 0.5"):
    AuxiliarySchedule((0.5, 0.2), ratio=0.5)
