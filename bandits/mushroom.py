"""The mushroom contextual bandit (paper Section 4.3; the task of its refs [9, 24], Blundell et al.
2015 and Guez 2015), coded as the deep contextual bandits benchmark does (Riquelme et al. 2018,
`sample_mushroom_data`).

Each step shows one mushroom, drawn uniformly with replacement from the 8,124
of the UCI Mushroom data; its 22 categorical attributes, one-hot encoded,
are the context (117 features: the values that occur in the data, as
`pandas.get_dummies` gives them). Two actions: pass (reward 0) or eat
(edible: 5; poisonous: 5 or -35 with probability 1/2 each, so -15 in
expectation). The omniscient agent eats exactly the edible mushrooms.

This module does not import TensorFlow.
"""
from __future__ import annotations

import csv
import dataclasses
from typing import Optional

import numpy as np

from common import download

RELATIVE_PATH = "mushroom/agaricus-lepiota.data"
URL = ("https://archive.ics.uci.edu/ml/machine-learning-databases/mushroom/"
       "agaricus-lepiota.data")
SHA256 = "e65d082030501a3ebcbcd7c9f7c71aa9d28fdfff463bf4cf4716a3fe13ac360e"

# The class (e/p), then the values each of the 22 attributes takes in the UCI data, in the
# order of the file's columns (cap-shape ... habitat); '?' is stalk-root's missing value.
CLASS_VALUES = "ep"
ATTRIBUTE_VALUES = ("bcfksx", "fgsy", "bcegnpruwy", "ft", "acflmnpsy", "af", "cw", "bn",
                    "beghknopruwy", "et", "?bcer", "fksy", "fksy", "bcegnopwy", "bcegnopwy", "p",
                    "nowy", "not", "eflnp", "bhknoruwy", "acnsvy", "dglmpuw")
NUM_FEATURES = sum(len(values) for values in ATTRIBUTE_VALUES)   # 117

PASS, EAT = 0, 1
NUM_ACTIONS = 2
REWARD_PASS = 0.0
REWARD_EDIBLE = 5.0
REWARD_POISONOUS_LUCKY, REWARD_POISONOUS_UNLUCKY = 5.0, -35.0
PROBABILITY_UNLUCKY = 0.5
EXPECTED_REWARD_POISONOUS = (PROBABILITY_UNLUCKY * REWARD_POISONOUS_UNLUCKY
                             + (1 - PROBABILITY_UNLUCKY) * REWARD_POISONOUS_LUCKY)   # -15


@dataclasses.dataclass(frozen=True)
class Mushrooms:
  """The encoded data: [8124, 117] one-hot contexts and whether each mushroom is edible."""
  contexts: np.ndarray
  edible: np.ndarray


def parse(path: str) -> Mushrooms:
  """Reads and one-hot encodes the UCI file; ValueError naming the line of a corrupt one."""
  rows = []
  with open(path, newline="") as handle:
    for line_number, row in enumerate(csv.reader(handle), start=1):
      if not row:
        continue
      if len(row) != 1 + len(ATTRIBUTE_VALUES):
        raise ValueError(f"{path}, line {line_number}: {len(row)} fields; allowed: "
                         f"{1 + len(ATTRIBUTE_VALUES)} (the class, then 22 attributes)")
      for column, (value, allowed) in enumerate(zip(row, (CLASS_VALUES,) + ATTRIBUTE_VALUES)):
        if len(value) != 1 or value not in allowed:
          raise ValueError(f"{path}, line {line_number}, column {column + 1}: unknown category "
                           f"{value!r}; allowed: {', '.join(allowed)}")
      rows.append(row)
  if not rows:
    raise ValueError(f"{path} holds no mushrooms")
  contexts = np.zeros([len(rows), NUM_FEATURES], np.float32)
  offsets = np.cumsum([0] + [len(values) for values in ATTRIBUTE_VALUES[:-1]])
  for index, row in enumerate(rows):
    for offset, value, allowed in zip(offsets, row[1:], ATTRIBUTE_VALUES):
      contexts[index, offset + allowed.index(value)] = 1.0
  edible = np.array([row[0] == "e" for row in rows])
  return Mushrooms(contexts=contexts, edible=edible)


def locate(data_dir: Optional[str] = None, download_allowed: bool = True) -> str:
  """The verified path of the mushroom file: in `data_dir/mushroom/`, else the cache, else
  downloaded into it (SHA-256 checked); OSError if missing and not downloaded, or corrupt."""
  return download.locate(RELATIVE_PATH, SHA256, URL, data_dir, download=download_allowed)


def load(data_dir: Optional[str] = None, download_allowed: bool = True) -> Mushrooms:
  """The mushrooms from `data_dir/mushroom/`, else the cache, else downloaded (SHA-256 checked)."""
  return parse(locate(data_dir, download_allowed))


@dataclasses.dataclass(frozen=True)
class EnvironmentStream:
  """What the environment shows and does over a horizon, for several seeds: [seeds, horizon].

  `rows` are the mushrooms shown; `unlucky` says whether eating a poisonous one
  would give -35 (else +5). Every agent of a seed meets the same stream.
  """
  rows: np.ndarray
  unlucky: np.ndarray

  @classmethod
  def draw(cls, seeds: np.ndarray, horizon: int, num_mushrooms: int,
           drawn_for: int = 0) -> "EnvironmentStream":
    """The first `horizon` steps of each seed's stream drawn for max(horizon, drawn_for) steps.

    The luck is drawn after all the mushrooms, so streams drawn for different lengths show the
    same mushrooms with different luck: a shorter run meets a longer one's stream step for step
    only when drawn for the longer one's length.
    """
    length = max(horizon, drawn_for)
    streams = [np.random.default_rng([int(seed), 0]) for seed in seeds]
    rows = np.stack([rng.integers(0, num_mushrooms, size=length) for rng in streams])
    unlucky = np.stack([rng.random(length) < PROBABILITY_UNLUCKY for rng in streams])
    return cls(rows=rows[:, :horizon], unlucky=unlucky[:, :horizon])


def rewards(edible: np.ndarray, unlucky: np.ndarray, actions: np.ndarray) -> np.ndarray:
  """The realised rewards of `actions` (any matching shapes)."""
  eat_reward = np.where(edible, REWARD_EDIBLE,
                        np.where(unlucky, REWARD_POISONOUS_UNLUCKY, REWARD_POISONOUS_LUCKY))
  return np.where(actions == EAT, eat_reward, REWARD_PASS).astype(np.float32)


def expected_rewards(edible: np.ndarray, actions: np.ndarray) -> np.ndarray:
  """The expected rewards of `actions` given the mushrooms (the luck averaged out)."""
  eat_reward = np.where(edible, REWARD_EDIBLE, EXPECTED_REWARD_POISONOUS)
  return np.where(actions == EAT, eat_reward, REWARD_PASS)


def optimal_actions(edible: np.ndarray) -> np.ndarray:
  """The omniscient agent's actions: eat exactly the edible mushrooms."""
  return np.where(edible, EAT, PASS)
