"""Refine and sample (paper Algorithm 1), for M members at once.

From a trained mean-field model, every member m = 1..M runs K steps: sample
a_k ~ q_{k-1}(a_k), set q_k(w) := q_{k-1}(w | a_k) and the prior to
p(w | a_1..k), then maximise the conditional ELBO for T Adam steps (state reset
at every k). All members share one vectorised, compiled computation over a
leading member axis; each member has its own random streams, so the result is
the same as refining the members one at a time (tested). Under a
`tf.distribute` strategy (built in its scope) the optimisation is
data-parallel: every replica holds all M members and a share of each
minibatch (`TrainingLoop`), so the members equal one device's.

ELBO_aux (paper Eq. 13 with the residual of w kept in q_K):
  ELBO_aux = E_{q_K} log p(y | x, w) - KL(q_K(w) || p(w | a_1..K))
             - sum_k log q_{k-1}(a_k) / p(a_k).
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from auxiliary_sampling.elbo_estimate import (ElboTerms, PartialEstimate, estimate_elbo,
                                              estimate_elbo_terms, trace_elbo_estimate)
from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.graph_loops import graph_function
from auxiliary_sampling.layers import MeanFieldLayer
from auxiliary_sampling.loop_settings import LoopSettings
from auxiliary_sampling.model_parameters import (layers_of, mean_field_parameters, model_kl,
                                                  num_members_of)
from auxiliary_sampling.noise import MemberNoise
from auxiliary_sampling.progress import ProgressLog
from auxiliary_sampling.refinement_checkpoint import (FINAL_ESTIMATE, INITIAL_ESTIMATE,
                                                      RefinementCheckpoint, RefinementProgress,
                                                      model_digest)
from auxiliary_sampling.refinement_result import RefinementResult
from auxiliary_sampling.schedule import (PAPER_NUM_AUXILIARY, PAPER_STEPS_PER_AUXILIARY,
                                         PAPER_VARIANCE_RATIO, AuxiliarySchedule)
from auxiliary_sampling.stream_seeding import seed_member_streams, stream_seeds
from auxiliary_sampling.trained_state import load_trained_state, refinement_variables
from auxiliary_sampling.training_batches import BatchSource, UniformBatches
from auxiliary_sampling.training_data import LogLikelihoodFn, check_data
from auxiliary_sampling.training_loop import InputTransform, TrainingLoop
from auxiliary_sampling.weight_noise import check_weight_noise
from common.validation import check_integer

ModelFn = Callable[[Optional[int]], tf.Module]


@contextlib.contextmanager
def _rewound_noise(model: tf.Module) -> Iterator[None]:
  """Restores the counters of the model's noise streams after the body, so that a measurement taken
  inside it leaves every later draw (and so the refinement's result) exactly as without it."""
  counters = [
      layer.noise.counter for layer in layers_of(model) if isinstance(layer, MeanFieldLayer)
  ]
  saved = [counter.numpy() for counter in counters]
  try:
    yield
  finally:
    for counter, value in zip(counters, saved):
      counter.assign(value)


def _stage_subset(inputs: tf.Tensor, labels: tf.Tensor, examples: int
                  ) -> Optional[tuple[tf.Tensor, tf.Tensor, float]]:
  """(inputs, labels, N / n) of `examples` evenly strided training examples, or None for the
  whole data (0, or at least N)."""
  total = int(inputs.shape[0])
  if examples == 0 or examples >= total:
    return None
  indices = tf.range(0, examples) * (total // examples)
  return tf.gather(inputs, indices), tf.gather(labels, indices), total / examples


class Refiner(tf.Module):
  """Refines samples (paper Algorithm 1) for one architecture on one dataset, again and again.

  The member model, the conditioning and the training loop (compiled) are built once, for
  `num_samples` members of a `total_members` run starting at `member_offset`; every `refine`
  call copies a trained model into them and reseeds every stream, so it gives what a fresh
  `refine()` with the same arguments gives (tested) without tracing or compiling again: for
  scripts that refine many trained models or seeds in one process.

  `batches` replaces the uniform minibatches of `inputs` and `labels` the optimisation draws
  (a bandit's growing per-seed histories, `GroupedBatches`); with it `inputs` and `labels` may
  be None, and then only `refine_in_graph` runs (`refine` estimates ELBOs on the whole data).
  A module: a checkpoint of an object holding it holds every stream's state (a bandit agent's).
  """

  def __init__(self, model_fn: ModelFn, inputs, labels, log_likelihood_fn: LogLikelihoodFn, *,
               num_samples: int = 10, batch_size: int = 256, member_offset: int = 0,
               total_members: Optional[int] = None, weight_noise: str = "per_example",
               refit_deterministic: bool = False,
               penalty_fn: Optional[Callable[[tf.Module], tf.Tensor]] = None,
               input_transform: Optional[InputTransform] = None,
               loop_settings: LoopSettings = LoopSettings(),
               batches: Optional[BatchSource] = None):
    super().__init__(name="refiner")
    self.num_samples = check_integer("num_samples", num_samples)
    check_weight_noise(weight_noise)
    self.member_offset = check_integer("member_offset", member_offset, minimum=0)
    self.total_members = check_integer(
        "total_members", self.num_samples if total_members is None else total_members)
    if self.member_offset + self.num_samples > self.total_members:
      raise ValueError(f"members [{self.member_offset}, {self.member_offset + self.num_samples}) "
                       f"do not fit in total_members={self.total_members}")
    self.inputs, self.labels = (None, None) if batches is not None and inputs is None else (
        check_data(inputs, labels))
    self.log_likelihood_fn = log_likelihood_fn
    # What shapes a refinement besides `refine`'s arguments (recorded in its checkpoints).
    self.settings = dict(num_samples=self.num_samples, member_offset=self.member_offset,
                         total_members=self.total_members, batch_size=int(batch_size),
                         weight_noise=weight_noise, refit_deterministic=bool(refit_deterministic),
                         penalty=penalty_fn is not None,
                         input_transform=input_transform is not None)
    self.members = model_fn(self.num_samples)
    if batches is None:
      batches = UniformBatches(self.inputs, self.labels, batch_size)
      self.members(self.inputs[:1])
    else:   # built on each member's first row
      self.members(batches.gather(batches.inputs,
                                  tf.zeros([*batches.batch_shape[:-1], 1], tf.int64)))
    built_members = num_members_of(self.members)
    if built_members != self.num_samples:
      raise ValueError(f"model_fn({self.num_samples}) built a model with {built_members} members")
    self.parameters = mean_field_parameters(self.members)
    self.auxiliary_noise = MemberNoise(self.num_samples, self.total_members, self.member_offset,
                                       name="auxiliary_noise")
    if penalty_fn is not None:
      def kl_fn():
        return model_kl(self.members) + penalty_fn(self.members)
    else:
      kl_fn = None
    self.loop = TrainingLoop(
        ElboObjective(self.members, log_likelihood_fn, kl_fn=kl_fn, weight_noise=weight_noise),
        GradientUpdate(Adam(refinement_variables(self.members, refit_deterministic))),
        batches, input_transform=input_transform, loop_settings=loop_settings.for_refinement())

  def reseed(self, layer_seed: int, auxiliary_seed: int, data_seed: int) -> None:
    """Restarts the members' weight-noise streams (each layer's derived from `layer_seed`), the
    auxiliary variables' stream and the minibatch stream; `refine` reseeds them with
    `stream_seeds(seed)`."""
    seed_member_streams(self.members, layer_seed, self.total_members, self.member_offset)
    self.auxiliary_noise.set_seed(auxiliary_seed)
    self.loop.reseed(data_seed)

  def _conditioned(self, variance_fraction, remaining_fraction) -> tf.Tensor:
    """Draws a_k for every parameter and conditions on it; the summed log q(a_k) / p(a_k)."""
    return tf.add_n([p.condition_on_auxiliary(variance_fraction, remaining_fraction,
                                              self.auxiliary_noise.normal(p.event_shape))
                     for p in self.parameters])

  @graph_function
  def _condition(self, variance_fraction, remaining_fraction) -> tf.Tensor:
    """`_conditioned` as one compiled call."""
    return self._conditioned(variance_fraction, remaining_fraction)

  def refine_in_graph(self, trained_model: tf.Module, *, schedule: AuxiliarySchedule,
                      steps_per_auxiliary, learning_rates: Sequence[float]) -> tf.Module:
    """Algorithm 1 as ops a caller's compiled function runs: copies `trained_model` into the
    members, then for each auxiliary variable draws it, conditions on it and takes
    `steps_per_auxiliary` (an integer or a scalar tensor; 0: none) Adam steps at its learning
    rate, Adam reset for each; returns the members.

    Unlike `refine`, it reseeds nothing (every stream goes on from the previous call: fresh
    samples each time), estimates no ELBO, and may start from a model of S members for M = r * S
    (member m from member m // r): a Thompson sampler refines fresh samples at every decision
    this way (`bandits.agents`).
    """
    if len(learning_rates) != schedule.num_auxiliary:
      raise ValueError(f"got {len(learning_rates)} learning rates for K={schedule.num_auxiliary} "
                       "auxiliary variables")
    steps_per_auxiliary = tf.convert_to_tensor(steps_per_auxiliary, tf.int32)
    load_trained_state(trained_model, self.members)
    for stage, (fraction, learning_rate) in enumerate(zip(schedule.variance_fractions,
                                                          learning_rates), 1):
      # Both fractions in float64, exact remainder included: the model casts them to its dtype.
      self._conditioned(tf.constant(fraction, tf.float64),
                        tf.constant(schedule.remaining_fraction(stage), tf.float64))
      self.loop.update.reset()
      self.loop.run(steps_per_auxiliary, tf.constant(learning_rate, tf.float32),
                    tf.constant(0.0))
    return self.members

  def _check_whole_data(self) -> None:
    if self.inputs is None:
      raise ValueError("this refiner was built on a batch source without the whole data, which "
                       "refine and prepare estimate ELBOs on; allowed: refine_in_graph")

  def prepare(self, elbo_batch_size: int = 1024, elbo_num_samples: int = 1) -> float:
    """Traces (and under jit_compile compiles) every computation a `refine` call runs, by running
    each once on the members as built (the whole-data ELBO estimate is traced, not run: running
    it was one more pass over the training data); returns the seconds it took.

    A `refine` call then starts at once: it reloads every variable these runs change and reseeds
    every stream, so its result is the same as without this (tested). Give the ELBO settings the
    `refine` call will use (they are traced in). The members' variables are this refiner's own,
    so this can run on another thread while the model to refine is still training.
    """
    self._check_whole_data()
    started = time.perf_counter()
    self._condition(tf.constant(0.5, tf.float64), tf.constant(0.5, tf.float64))
    # `run` as `maximize` calls it, without its finiteness check: these members hold no trained
    # model yet, and whatever their ELBO is, it says nothing about the refinement to come.
    self.loop.update.reset()
    self.loop.run(tf.constant(1, tf.int32), tf.constant(0.0, tf.float32),
                       tf.zeros([self.num_samples], tf.float32))
    trace_elbo_estimate(self.members, self.inputs, self.labels, self.log_likelihood_fn,
                        elbo_batch_size, elbo_num_samples)
    return time.perf_counter() - started

  def refine(self, trained_model: tf.Module, *, schedule: Optional[AuxiliarySchedule] = None,
             steps_per_auxiliary: int = PAPER_STEPS_PER_AUXILIARY,
             learning_rate_rule: str = "paper",
             learning_rates: Optional[list[float]] = None, seed: int = 0,
             elbo_batch_size: int = 1024, elbo_num_samples: int = 1,
             stage_elbo_aux: bool = False, stage_elbo_examples: int = 0,
             checkpoint_dir: Optional[str] = None, checkpoint_seconds: float = 600.0,
             after_checkpoint: Optional[Callable[[str], None]] = None) -> RefinementResult:
    """`num_samples` refined samples from `trained_model`; the arguments are `refine()`'s."""
    self._check_whole_data()
    stage_elbo_examples = check_integer("stage_elbo_examples", stage_elbo_examples, minimum=0)
    steps_per_auxiliary = check_integer("steps_per_auxiliary", steps_per_auxiliary, minimum=0)
    schedule = schedule or AuxiliarySchedule.geometric(PAPER_VARIANCE_RATIO, PAPER_NUM_AUXILIARY)
    if learning_rates is None:
      learning_rates = schedule.learning_rates(learning_rate_rule)
    elif len(learning_rates) != schedule.num_auxiliary:
      raise ValueError(f"got {len(learning_rates)} learning rates for K={schedule.num_auxiliary} "
                       "auxiliary variables")
    trained_members = num_members_of(trained_model)
    if trained_members not in (None, 1):
      raise ValueError(f"the trained model has {trained_members} members; refine starts from one "
                       "mean-field model (no member axis, or a single member)")
    started = time.perf_counter()
    members, inputs, labels = self.members, self.inputs, self.labels
    load_trained_state(trained_model, members)
    self.reseed(*stream_seeds(seed))
    for dtype in {p.remaining_prior_fraction.dtype for p in self.parameters}:
      schedule.check_dtype(dtype)
    num_auxiliary = schedule.num_auxiliary
    checkpoint, state = None, None
    if checkpoint_dir is not None:
      arguments = dict(
          self.settings, variance_fractions=[float(f) for f in schedule.variance_fractions],
          steps_per_auxiliary=steps_per_auxiliary,
          learning_rates=[float(rate) for rate in learning_rates], seed=int(seed),
          elbo_batch_size=int(elbo_batch_size), elbo_num_samples=int(elbo_num_samples),
          stage_elbo_aux=bool(stage_elbo_aux), stage_elbo_examples=stage_elbo_examples,
          trained_model=model_digest(trained_model))
      checkpoint = RefinementCheckpoint(
          self, checkpoint_dir, arguments, checkpoint_seconds=checkpoint_seconds,
          after_save=after_checkpoint,
          timed_saves=not isinstance(self.loop.strategy, tf.distribute.MultiWorkerMirroredStrategy))
      state = checkpoint.restore()
    resumed_from = None if state is None else state.label
    if resumed_from is not None:
      logging.info("refinement resumes from its checkpoint, after %s", resumed_from)
    state = state or RefinementProgress(self.num_samples)
    seconds_before = state.elapsed_seconds

    def save(label: str) -> None:
      if checkpoint is not None:
        state.elapsed_seconds = seconds_before + time.perf_counter() - started
        checkpoint.save(state, label)

    def whole_data_terms(which: str, description: str) -> ElboTerms:
      """A whole-dataset estimate that resumes where a save inside it left off."""
      def after_piece(partial: PartialEstimate) -> None:
        if checkpoint is not None and checkpoint.due():
          state.estimate_of, state.estimate = which, partial
          save(f"{description}, batch {partial.batches_done:,}")
      terms = estimate_elbo_terms(members, inputs, labels, self.log_likelihood_fn,
                                  elbo_batch_size, elbo_num_samples, description,
                                  resume_from=state.resume_point(which), after_piece=after_piece)
      state.estimate_of, state.estimate = "", None
      return terms

    stage_data = _stage_subset(inputs, labels, stage_elbo_examples)

    def stage_elbo() -> np.ndarray:
      """The members' ELBO now, on the stage data (the same draws each time it is called)."""
      with _rewound_noise(members):
        if stage_data is None:
          return estimate_elbo(members, inputs, labels, self.log_likelihood_fn, elbo_batch_size,
                               elbo_num_samples, "stage ELBO_aux estimate")
        subset_inputs, subset_labels, scale = stage_data
        terms = estimate_elbo_terms(members, subset_inputs, subset_labels,
                                    self.log_likelihood_fn, elbo_batch_size, elbo_num_samples,
                                    "stage ELBO_aux estimate")
        return scale * terms.expected_log_likelihood - terms.kl

    if state.initial_elbo is None:
      state.initial_elbo = whole_data_terms(
          INITIAL_ESTIMATE, "ELBO estimate of the members before refinement").elbo
      save("the members' ELBO estimate before refinement")
    if stage_elbo_aux and stage_data is not None and state.stage_start is None:
      measured = time.perf_counter()
      state.stage_start = stage_elbo()
      state.stage_seconds += time.perf_counter() - measured
      save("the stage subset's ELBO estimate before refinement")
    progress = ProgressLog(f"refinement of {self.num_samples} members",
                           num_auxiliary * steps_per_auxiliary,
                           start_step=state.stages_done * steps_per_auxiliary,
                           value_name="ELBO_aux")
    for stage in range(state.stages_done + 1, num_auxiliary + 1):
      fraction, learning_rate = schedule.variance_fractions[stage - 1], learning_rates[stage - 1]
      stage_began = time.perf_counter()
      # Both fractions in float64, exact remainder included: the model casts them to its dtype.
      log_ratio = self._condition(tf.constant(fraction, tf.float64),
                                  tf.constant(schedule.remaining_fraction(stage), tf.float64))
      log_ratio = log_ratio.numpy().astype(np.float64)
      state.condition_seconds.append(time.perf_counter() - stage_began)
      state.cumulative_log_ratio += log_ratio
      state.log_ratios.append(log_ratio)
      stage_name = f"auxiliary variable {stage}/{num_auxiliary}"
      if steps_per_auxiliary:
        optimise_began = time.perf_counter()
        stage_first_step = (stage - 1) * steps_per_auxiliary

        def report(done: int, trace: np.ndarray, first_step: int = stage_first_step,
                   stage_name: str = stage_name) -> None:
          """A progress line inside a long stage (about every 30 s)."""
          progress.log(first_step + done, float(np.mean(trace[-20:])), stage=stage_name)
        state.traces.append(self.loop.maximize(
            steps_per_auxiliary, learning_rate, elbo_offset=state.cumulative_log_ratio,
            reset_optimizer=True, progress=report))
        state.optimise_seconds.append(time.perf_counter() - optimise_began)
        progress.log(stage * steps_per_auxiliary, float(np.mean(state.traces[-1][-20:])),
                     stage=stage_name)
      stage_ended = time.perf_counter()
      state.refine_seconds += stage_ended - stage_began
      # On the whole data, the last stage's is the final estimate below.
      if stage_elbo_aux and (stage < num_auxiliary or stage_data is not None):
        state.stage_values.append(stage_elbo() - state.cumulative_log_ratio)
        state.stage_seconds += time.perf_counter() - stage_ended
      save(stage_name)
    if state.final_terms is None:
      state.final_terms = whole_data_terms(FINAL_ESTIMATE, "ELBO estimate of the refined members")
      save("the refined members' ELBO estimate")
    final_terms = state.final_terms
    kl_aux = final_terms.kl + state.cumulative_log_ratio
    elbo_aux = final_terms.expected_log_likelihood - kl_aux
    trace = (np.concatenate(state.traces) if state.traces
             else np.zeros([0, self.num_samples], np.float32))
    timings = {"refine_seconds": state.refine_seconds,
               "total_seconds": seconds_before + time.perf_counter() - started}
    optimise_seconds, condition_seconds = state.optimise_seconds, state.condition_seconds
    if len(optimise_seconds) > 1:
      # Every stage runs the same compiled conditioning and loop for the same steps; only the
      # first traces them (in a Refiner's first call).
      timings["trace_seconds"] = sum(
          max(0.0, seconds[0] - float(np.median(seconds[1:])))
          for seconds in (optimise_seconds, condition_seconds))
    if stage_elbo_aux:
      timings["stage_elbo_seconds"] = state.stage_seconds
    stage_values = list(state.stage_values)
    return RefinementResult(
        model=members, elbo_aux=elbo_aux, initial_elbo=state.initial_elbo,
        log_ratios=np.stack(state.log_ratios), trace=trace, learning_rates=list(learning_rates),
        timings=timings,
        stage_elbo_aux=(None if not stage_elbo_aux else np.stack(stage_values) if state.stage_start
                        is not None else np.stack(stage_values + [elbo_aux])),
        stage_elbo_start=state.stage_start,
        expected_log_likelihood=final_terms.expected_log_likelihood, kl_aux=kl_aux,
        resumed_from=resumed_from)


def refine(model_fn: ModelFn, trained_model: tf.Module, inputs, labels,
           log_likelihood_fn: LogLikelihoodFn, *, num_samples: int = 10,
           schedule: Optional[AuxiliarySchedule] = None,
           steps_per_auxiliary: int = PAPER_STEPS_PER_AUXILIARY,
           learning_rate_rule: str = "paper", learning_rates: Optional[list[float]] = None,
           batch_size: int = 256, seed: int = 0, member_offset: int = 0,
           total_members: Optional[int] = None, elbo_batch_size: int = 1024,
           elbo_num_samples: int = 1, weight_noise: str = "per_example",
           stage_elbo_aux: bool = False, stage_elbo_examples: int = 0,
           refit_deterministic: bool = False,
           penalty_fn: Optional[Callable[[tf.Module], tf.Tensor]] = None,
           input_transform: Optional[InputTransform] = None,
           loop_settings: LoopSettings = LoopSettings(),
           checkpoint_dir: Optional[str] = None, checkpoint_seconds: float = 600.0,
           after_checkpoint: Optional[Callable[[str], None]] = None) -> RefinementResult:
  """Draws `num_samples` refined posterior samples (paper Algorithm 1).

  Args:
    model_fn: builds the architecture: model_fn(num_members) for a member axis.
    trained_model: the trained mean-field model (no member axis, or one member).
    inputs, labels: the training data (in memory), N examples.
    log_likelihood_fn: (labels, outputs) -> per-example log p(y | x, w), [M, batch].
    num_samples: M, the number of refined samples.
    schedule: auxiliary variances; default the paper's, geometric with ratio
      PAPER_VARIANCE_RATIO (0.7) and K = PAPER_NUM_AUXILIARY (5).
    steps_per_auxiliary: T, Adam steps after each auxiliary variable (the paper's 200).
    learning_rate_rule: 'paper' or 'authors_code' (ignored if `learning_rates` given).
    learning_rates: explicit Adam learning rate per auxiliary variable.
    batch_size: minibatch size of the conditional-ELBO optimisation.
    seed: seeds all random streams.
    member_offset, total_members: refine members [member_offset, member_offset +
      num_samples) of a run of `total_members` (default: num_samples), drawing
      exactly the random numbers that run gives them; so members can be refined
      in separate calls (or checked against the vectorised run).
    elbo_batch_size, elbo_num_samples: the whole-dataset ELBO estimates.
    weight_noise: how the optimisation draws weight noise, 'per_example' (local
      reparameterisation / Flipout) or 'per_batch' (one draw per member and
      step: cheaper, noisier gradients); the ELBO estimates are per_example.
    stage_elbo_aux: also estimate the whole-dataset ELBO_aux after each
      auxiliary variable's optimisation (Eq. 13 with k in place of K; paper
      Figure 4's staircase without minibatch noise). Costs K - 1 more ELBO
      estimates, timed apart from `refine_seconds`; the refined samples are
      the same as without it.
    stage_elbo_examples: with `stage_elbo_aux`, estimate every stage's ELBO_aux, and the
      start's, on this many training examples (0: all): a fixed, evenly strided subset, its
      expected log-likelihood scaled by N / n, with the same weight draws at every stage, so
      that the staircase's steps cost n / N of the whole-data estimates and stay paired. The
      final ELBO_aux is always the whole data's.
    refit_deterministic: also optimise each member's own copy of the model's
      other trainable variables (deterministic layers, batch norm), as the
      authors' Keras refit of a partly Bayesian ResNet did; by default only
      the mean-field posteriors move.
    penalty_fn: members -> [M] extra penalty subtracted from the objective
      in the optimisation, at the whole-dataset scale (e.g. N times an L2
      on deterministic kernels); not part of the reported ELBOs.
    input_transform: augments every optimisation batch (as VI's training
      did); the ELBO estimates use the data as given.
    loop_settings: how the optimisation's loop runs (its `for_refinement()`).
    checkpoint_dir: if given, the refinement saves its state there after each
      whole-dataset estimate and each auxiliary variable, and every
      `checkpoint_seconds` inside a whole-dataset estimate, and a call whose
      arguments match resumes from it (`refinement_checkpoint`): the result is
      the uninterrupted refinement's bit for bit. A checkpoint made with other
      arguments, or from another trained model, is a ValueError.
    after_checkpoint: called with a description of where the refinement
      stands after every save (to log it, or to stop there).
  """
  started = time.perf_counter()
  refiner = Refiner(model_fn, inputs, labels, log_likelihood_fn, num_samples=num_samples,
                    batch_size=batch_size, member_offset=member_offset,
                    total_members=total_members, weight_noise=weight_noise,
                    refit_deterministic=refit_deterministic, penalty_fn=penalty_fn,
                    input_transform=input_transform, loop_settings=loop_settings)
  result = refiner.refine(trained_model, schedule=schedule, steps_per_auxiliary=steps_per_auxiliary,
                          learning_rate_rule=learning_rate_rule, learning_rates=learning_rates,
                          seed=seed, elbo_batch_size=elbo_batch_size,
                          elbo_num_samples=elbo_num_samples, stage_elbo_aux=stage_elbo_aux,
                          stage_elbo_examples=stage_elbo_examples,
                          checkpoint_dir=checkpoint_dir, checkpoint_seconds=checkpoint_seconds,
                          after_checkpoint=after_checkpoint)
  result.timings["total_seconds"] = time.perf_counter() - started   # building the members too
  return result
