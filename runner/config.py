"""The settings every method takes (paper Section 4.1 defaults), whatever the benchmark.

A benchmark's config extends `MethodConfig` with its data and architecture and with the
settings of the methods it offers (`methods.registry.configs_of`), each method's own.
No TensorFlow here: the binaries check flags before it loads.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from methods.trainers.learning_rate import LearningRateSchedule
from common.config import NOTHING, RESULTS, UsageError, setting, with_default
from common.distribution import DeviceConfig
from methods import network_kinds, registry
from methods.registry import ENSEMBLE, MNF, VI

# The registered methods (`methods.registry`), in table order; a benchmark offers those its
# networks supply (`registry.methods_for`).
METHODS = registry.names()
# Methods that refine the posterior they start from (paper Algorithm 1).
REFINED = registry.names_where(lambda method: method.refines)
# Methods of the deep ensemble's family (the jit_compile_ensemble flag acts on these).
ENSEMBLES = registry.names_where(lambda method: network_kinds.ENSEMBLE in method.needs)
# Methods that fit a mean-field posterior (the benchmarks' initial posterior scale acts on these).
MEAN_FIELD = registry.names_where(lambda method: network_kinds.MEAN_FIELD in method.needs)


@dataclasses.dataclass
class MethodConfig(DeviceConfig):
  """What `runner.dispatch.train_method` needs of every method, whatever the benchmark."""

  # Whether the benchmark's mean-field networks have point-estimated weights (deterministic
  # layers, batch norm) that refinement could refit per member (`refit_deterministic`).
  has_deterministic_weights: ClassVar[bool] = False

  method: str = setting("refined_vi", "Method to train and evaluate.", choices=METHODS,
                        shapes=RESULTS)
  # Compiling refinement's or the ensemble's loop acts on those methods' runs only, so the
  # commands of a table leave these flags out of the other methods' lines.
  jit_compile_refinement: bool = with_default(DeviceConfig, "jit_compile_refinement",
                                              only_when=("method", REFINED))
  jit_compile_ensemble: bool = with_default(DeviceConfig, "jit_compile_ensemble",
                                            only_when=("method", ENSEMBLES))
  seed: int = setting(0, "Seed of the split, the initialisation and every random stream.",
                      minimum=0)
  batch_size: int = setting(256, "Global minibatch of every Adam step, split evenly over replicas.",
                           minimum=1)
  learning_rate: float = setting(1e-3, "Adam learning rate of VI, MNF and the ensemble.", above=0)
  num_samples: int = setting(10, "M: posterior samples (refined samples) in the predictive.",
                             minimum=1, shapes=RESULTS)
  num_eval_samples: int = setting(
      0, "vi, vi_equal_compute, mnf: posterior draws in the predictive (0: M, --num_samples; the "
      "authors' ResNet-20 code scored VI with 1).", minimum=0, shapes=RESULTS)
  vi_checkpoint_dir: Optional[str] = setting(
      None,
      "VI checkpoint directory, shared by the vi, refined_vi and vi_equal_compute runs of one "
      "dataset and seed so that the mean-field model is trained once (default: under "
      "--output_dir).",
      shapes=NOTHING)
  steps_per_checkpoint: int = setting(5_000,
                                      "Training steps between checkpoints (and progress lines).",
                                      minimum=1, shapes=NOTHING)

  def check_replicas(self, num_replicas: int) -> None:
    """The global batch (and so refinement, VI, MNF and every ensemble member's) must split."""
    super().check_replicas(num_replicas)
    if self.batch_size % num_replicas:
      raise UsageError(f"--batch_size={self.batch_size} does not split evenly over "
                       f"{num_replicas} replicas; allowed: a multiple of {num_replicas}")

  # How long each trainer runs, given the training set's size. Here the step flags say it; a
  # benchmark may count in epochs instead (ResNet-20), so the methods ask these three.
  def num_steps(self, trainer: str, num_examples: int) -> int:
    """Adam steps of `trainer` (VI, MNF or ENSEMBLE) on `num_examples` training examples."""
    del num_examples
    return getattr(self, {VI: "vi_steps", MNF: "mnf_steps", ENSEMBLE: "ensemble_steps"}[trainer])

  def learning_rate_schedule(self, num_examples: int) -> LearningRateSchedule:
    """The Adam learning rate over the steps of VI, MNF and each ensemble member (constant)."""
    del num_examples
    return LearningRateSchedule(self.learning_rate)

  def checkpoint_interval(self, num_examples: int) -> int:
    """Training steps between checkpoints."""
    del num_examples
    return self.steps_per_checkpoint

  def mean_field_prior(self) -> tuple[float, bool]:
    """(initial prior scale, whether Adam learns it) of the mean-field networks, as the run's
    method says (`ViConfig.mean_field_prior`, `VognConfig.mean_field_prior`)."""
    return registry.method(self.method).config.mean_field_prior(self)

  @property
  def eval_samples(self) -> int:
    """Posterior draws the vi, vi_equal_compute and mnf predictives average."""
    return self.num_eval_samples or self.num_samples
