"""Settings of the ResNet-20 binary (paper Table 3); the defaults are the paper's.

Training length is counted in epochs, as the authors' schedule is: Adam 1e-3,
x0.1 after epoch 80, x0.01 after 120, x0.001 after 160, x0.0005 after 180,
200 epochs (their code ran 30,000 steps of 256 on CIFAR-10: `--epochs=153.6`).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from runner.image_config import ImageClassificationConfig
from methods.trainers.learning_rate import LearningRateSchedule, steps_in
from common.config import NOTHING, RESULTS, UsageError, setting, with_default
from methods import network_kinds, registry
from methods.refined_vi import RefinementConfig
from methods.registry import ENSEMBLE, EXTRA_VI, VI

VARIATIONAL_MODES = ("hybrid", "full")
# ResNet-20 comes as mean-field and ensemble networks, with an L2 penalty on point estimates.
METHODS = registry.methods_for((network_kinds.MEAN_FIELD, network_kinds.ENSEMBLE), penalty=True)
PAPER_DECAY_EPOCHS = (80.0, 120.0, 160.0, 180.0)
PAPER_DECAY_FACTORS = (0.1, 0.01, 0.001, 0.0005)
DEPTH = 20   # the paper's ResNet-20


def blocks_per_stack(depth: int) -> int:
  """n, the residual blocks per stack of a ResNet of depth 6n + 2 (3 in ResNet-20); any other
  depth is a ValueError."""
  if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
    raise ValueError(f"depth={depth!r} is not a ResNet depth; allowed: 6n + 2 for n >= 1 "
                     "(8, 14, 20, 26, 32, ...)")
  return (depth - 2) // 6


@dataclasses.dataclass
class ResNetConfig(ImageClassificationConfig, *registry.configs_of(METHODS)):
  """One dataset, variant (variational mode, batch norm), method and seed of ResNet-20."""

  # The stem, the shortcuts and batch norm stay point estimates in the variational ResNets.
  has_deterministic_weights: ClassVar[bool] = True

  dataset: str = with_default(ImageClassificationConfig, "dataset", "cifar10")
  method: str = setting("refined_vi", "Method to train and evaluate.", choices=METHODS,
                        shapes=RESULTS)
  variational: str = setting(
      "hybrid", "VI family: hybrid (the second convolution of every block Bayesian) or full "
      "(both); the stem, the shortcuts and the ensemble's members are deterministic.",
      choices=VARIATIONAL_MODES, shapes=(VI, EXTRA_VI))
  batchnorm: bool = setting(False, "Batch norm after every block convolution (per member).")
  depth: int = setting(DEPTH, "Layers of the ResNet, 6n + 2: 3 stacks of n residual blocks "
                       "(20: ResNet-20, the paper's; 8, 14, 32, 56, ...).", minimum=8)
  epochs: float = setting(
      200.0, "Epochs of VI and of every ensemble member (the authors' code: 153.6).", above=0,
      shapes=(EXTRA_VI,))
  vi_steps: int = setting(0, "Adam steps of VI (0: --epochs epochs).", minimum=0,
                          shapes=(EXTRA_VI,))
  ensemble_steps: int = setting(0, "Adam steps of every ensemble member (0: --epochs epochs).",
                                minimum=0, shapes=RESULTS)
  decay_epochs: tuple[float, ...] = setting(
      PAPER_DECAY_EPOCHS, "Epochs after which the learning rate steps down (the paper's).",
      minimum=0)
  decay_factors: tuple[float, ...] = setting(
      PAPER_DECAY_FACTORS, "The learning rate's factor after each of --decay_epochs.", above=0)
  l2: float = setting(1e-4, "L2 weight on the deterministic convolutions' kernels (per example, "
                      "as a Keras regulariser; the authors': 1e-4).", minimum=0)
  num_auxiliary: int = with_default(RefinementConfig, "num_auxiliary", 10)
  variance_ratio: float = with_default(RefinementConfig, "variance_ratio", 0.5)
  steps_per_checkpoint: int = setting(
      0, "Training steps between checkpoints and progress lines (0: one epoch).", minimum=0,
      shapes=NOTHING)

  def check(self) -> None:
    super().check()
    try:
      blocks_per_stack(self.depth)
    except ValueError as error:
      raise UsageError(str(error).replace("depth=", "--depth=", 1)) from None
    if len(self.decay_epochs) != len(self.decay_factors):
      raise UsageError(f"--decay_epochs has {len(self.decay_epochs)} values but --decay_factors "
                       f"{len(self.decay_factors)}; allowed: one factor per epoch")
    if any(b <= a for a, b in zip(self.decay_epochs, self.decay_epochs[1:])) or (
        self.decay_epochs[0] <= 0):
      raise UsageError(f"--decay_epochs={','.join(f'{e:g}' for e in self.decay_epochs)} must be "
                       "increasing epochs > 0")

  def steps_per_epoch(self, num_examples: int) -> float:
    return num_examples / self.batch_size

  def num_steps(self, trainer: str, num_examples: int) -> int:
    """The step flag if set, else --epochs epochs of `num_examples` examples (VI, ensemble)."""
    steps = super().num_steps(trainer, num_examples)
    if steps == 0 and trainer in (VI, ENSEMBLE):
      steps = max(1, steps_in(self.epochs, self.steps_per_epoch(num_examples)))
    return steps

  def learning_rate_schedule(self, num_examples: int) -> LearningRateSchedule:
    """Adam's rate stepped down after --decay_epochs (at the first step past each)."""
    return LearningRateSchedule.from_epochs(self.learning_rate, self.decay_epochs,
                                            self.decay_factors, self.steps_per_epoch(num_examples))

  def checkpoint_interval(self, num_examples: int) -> int:
    return self.steps_per_checkpoint or steps_in(1, self.steps_per_epoch(num_examples))
