"""Mean-field variational inference (Graves 2011; Blundell et al. 2015).

Maximises the ELBO over every trainable variable of a model built from
`auxiliary_sampling` layers: posterior locations and scales, the
empirical-Bayes prior scales (one per weight tensor) and any point-estimated
likelihood parameter (a regression noise scale), with KL divided by N and
Adam, in one compiled loop. Defaults are the paper's (Section 4.1): batch
256, learning rate 1e-3, 30,000 steps.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import model_kl
from auxiliary_sampling.training_batches import UniformBatches
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.training_loop import InputTransform, TrainingLoop
from methods.trainers.trainer_options import VI_OPTIMIZERS
from methods.trainers.learning_rate import LearningRateSchedule
from methods.trainers.misso import BlockBatches, IncrementalSurrogateOptimizer, SurrogateUpdate
from methods.trainers.momentum import MomentumSgd
from methods.trainers.training import CheckpointedTraining, Penalty, TrainingResult

__all__ = ["MeanFieldTrainer", "TrainingResult", "train_mean_field"]


class MeanFieldTrainer(CheckpointedTraining):
  """Mean-field VI of `model` on in-memory data; `train(n)` may be called again to train further.

  `optimizer`: adam (the paper's), momentum (SGD with heavy-ball `momentum`) or misso (the
  incremental surrogate update of `methods.trainers.misso`, its step size the learning rate);
  `weight_noise`: per_example (local reparameterisation and Flipout) or per_batch (one weight
  draw per step, Bayes by backprop's estimator). With `penalty` (the L2 of a partly
  deterministic network's point estimates) the objective is the ELBO minus N * penalty; the
  trace then holds that.
  `input_transform` augments every training batch; `loop_settings` say how the loop runs.
  """

  def __init__(self, model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
               learning_rate: float | LearningRateSchedule = 1e-3, batch_size: int = 256,
               seed: int = 0, steps_per_checkpoint: int = 5000, summary_every: int = 100,
               penalty: Optional[Penalty] = None, input_transform: Optional[InputTransform] = None,
               optimizer: str = "adam", momentum: float = 0.9,
               weight_noise: str = "per_example", loop_settings: LoopSettings = LoopSettings()):
    inputs, labels = check_data(inputs, labels)
    model(inputs[:1])
    if penalty is not None:
      num_examples = float(inputs.shape[0])

      def kl_fn():
        return model_kl(model) + num_examples * penalty(model)
    else:
      kl_fn = None
    if optimizer not in VI_OPTIMIZERS:
      raise ValueError(f"optimizer={optimizer!r} is not known; allowed: {', '.join(VI_OPTIMIZERS)}")
    objective = ElboObjective(model, log_likelihood_fn, kl_fn=kl_fn, weight_noise=weight_noise)
    variables = model.trainable_variables
    if optimizer == "misso":
      batches = BlockBatches(inputs, labels, batch_size, data_seed=seed)
      update = SurrogateUpdate(IncrementalSurrogateOptimizer(variables, batches.num_blocks),
                               batches)
    else:
      batches = UniformBatches(inputs, labels, batch_size)
      update = GradientUpdate(MomentumSgd(variables, momentum) if optimizer == "momentum"
                              else Adam(variables))
    loop = TrainingLoop(objective, update, batches, data_seed=seed,
                        input_transform=input_transform, loop_settings=loop_settings)
    super().__init__(loop, learning_rate, steps_per_checkpoint=steps_per_checkpoint,
                     summary_every=summary_every, name="vi")


def train_mean_field(model: tf.Module, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
                     num_steps: int = 30_000, learning_rate: float = 1e-3, batch_size: int = 256,
                     seed: int = 0, checkpoint_dir: Optional[str] = None,
                     summary_dir: Optional[str] = None,
                     steps_per_checkpoint: int = 5000,
                     loop_settings: LoopSettings = LoopSettings()) -> TrainingResult:
  """Trains `model` by maximising its ELBO for `num_steps` Adam steps (paper Section 4.1).

  With `checkpoint_dir`, resumes from the checkpoint there and saves one every
  `steps_per_checkpoint` steps; with `summary_dir`, logs the ELBO, the expected
  log-likelihood and the KL with `tf.summary`.
  """
  trainer = MeanFieldTrainer(model, inputs, labels, log_likelihood_fn, learning_rate=learning_rate,
                             batch_size=batch_size, seed=seed,
                             steps_per_checkpoint=steps_per_checkpoint,
                             loop_settings=loop_settings)
  return trainer.train(num_steps, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir)
