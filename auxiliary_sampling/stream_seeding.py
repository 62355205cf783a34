"""How a refinement seeds its random streams, all from one run seed.

`refine(seed=...)` runs three streams: the members' weight noise (each layer's seed derived from
the run seed and the layer's place), the auxiliary variables and the minibatches. Each layer's
noise keeps its members' rows of a `total_members` run, so members refined apart draw what the
vectorised run gives them.
"""
from __future__ import annotations

import tensorflow as tf

from auxiliary_sampling.layers import MeanFieldLayer
from auxiliary_sampling.model_parameters import layers_of
from auxiliary_sampling.noise import derived_seed

# Stream identifiers mixed into the run seed.
_LAYER_STREAM, _AUXILIARY_STREAM, _DATA_STREAM = 1, 2, 3


def stream_seeds(seed: int) -> tuple[int, int, int]:
  """The seeds of refine(seed=...)'s three streams: the members' weight noise (each layer's
  derived from the first), the auxiliary variables and the minibatches (`Refiner.reseed`)."""
  return seed, derived_seed(seed, _AUXILIARY_STREAM), derived_seed(seed, _DATA_STREAM)


def seed_member_streams(model: tf.Module, seed: int, total_members: int,
                        member_offset: int = 0) -> None:
  """Seeds every layer's noise.

  The model's members are rows [member_offset, ...) of `total_members`.
  """
  noisy_layers = [layer for layer in layers_of(model) if isinstance(layer, MeanFieldLayer)]
  for layer_index, layer in enumerate(noisy_layers):
    layer.noise.set_member_window(total_members, member_offset)
    layer.noise.set_seed(derived_seed(seed, _LAYER_STREAM, layer_index))
