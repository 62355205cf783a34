"""The mushroom bandit's agents, each vectorised over seeds (and samples or exploration rates).

Every agent holds, per member of a member axis, a reward model and the
history it has observed, and acts in two compiled calls per bandit step:
`choose` (the action for each member's context) and `observe` (append the
reward, then `update_steps` Adam steps on minibatches of the whole history,
paper Section 4.3). The members are the seeds (seed-major, then the
agent's variants), so one computation serves every seed:

  vi_ts       Thompson sampling: the mean of `num_thompson_samples` weight draws
              from the mean-field posterior picks the action;
  refined_ts  the same with refined samples (Algorithm 1 with K = 1, the library's
              `Refiner.refine_in_graph`): for each draw, a1 ~ q(a1), then
              q(w | a1) is refined for `refine_steps` on the history against
              p(w | a1); the refined sample is used once and discarded (the
              mean-field model is not changed);
  eps_greedy  the maximum-likelihood network's greedy action, a uniformly random
              one with probability epsilon (one member per epsilon and seed);
  svgd_ts,    Thompson sampling with a particle posterior (not in the paper; the
  fsvgd_ts    f-POVI paper ran f-SVGD on this bandit): `num_particles` networks
              per seed moved by weight- or function-space SVGD on the seed's
              history; the mean of `num_thompson_samples` uniformly drawn
              particles picks the action.

The mean-field models and their refinement are `auxiliary_sampling`'s
layers, its `TrainingLoop` over growing per-member histories (`GroupedBatches`)
and its `Refiner`; nothing of the algorithm is written here.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from auxiliary_sampling.adam import Adam
from auxiliary_sampling.elbo_objective import ElboObjective, GradientUpdate
from auxiliary_sampling.graph_loops import graph_function
from auxiliary_sampling.noise import derived_seed
from auxiliary_sampling.refine import Refiner
from auxiliary_sampling.schedule import AuxiliarySchedule
from auxiliary_sampling.stream_seeding import seed_member_streams
from auxiliary_sampling.training_batches import GroupedBatches
from auxiliary_sampling.training_loop import TrainingLoop
from auxiliary_sampling.weight_noise import weight_noise_scope
from bandits.config import BanditConfig
from bandits.mushroom import EAT, NUM_ACTIONS, PASS
from bandits.reward_model import RewardModel, reward_model
from methods.loop_settings import loop_settings_of
from methods.trainers.gaussian_head import gaussian_head_log_likelihood
from methods.trainers.particles import (FunctionSpaceSettings, ParticleNetwork,
                                        particle_batch_rows, particle_loop)

# Stream identifiers mixed into the run seed.
_MODEL_STREAM, _REFINED_STREAM, _AUXILIARY_STREAM, _DATA_STREAM, _EXPLORE_STREAM = range(1, 6)


class History(tf.Module):
  """What each of G members has observed: inputs [G, capacity, F + 1] (context, action) and
  rewards [G, capacity, 1]; the first `count` rows are filled."""

  def __init__(self, groups: int, capacity: int, num_features: int):
    super().__init__(name="history")
    self.inputs = tf.Variable(tf.zeros([groups, capacity, num_features + 1]), trainable=False)
    self.rewards = tf.Variable(tf.zeros([groups, capacity, 1]), trainable=False)
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False)

  def append(self, contexts: tf.Tensor, actions: tf.Tensor, rewards: tf.Tensor) -> None:
    """Adds one row per member: contexts [G, F], actions [G], rewards [G]."""
    row = tf.concat([contexts, tf.cast(actions, tf.float32)[:, tf.newaxis]], -1)
    # Whole-variable assigns: a tf.distribute strategy's mirrored variables take neither sliced
    # assigns nor scatters (a copy of the history per step, negligible beside the updates).
    groups = tf.range(tf.shape(row, out_type=tf.int64)[0])
    at_count = tf.stack([groups, tf.fill(tf.shape(groups), self.count.read_value())], -1)
    self.inputs.assign(tf.tensor_scatter_nd_update(self.inputs, at_count, row))
    self.rewards.assign(tf.tensor_scatter_nd_update(
        self.rewards, at_count, tf.cast(rewards, tf.float32)[:, tf.newaxis]))
    self.count.assign_add(1)


class Agent(tf.Module):
  """An agent for all seeds at once: `num_variants` members per seed (seed-major)."""

  def __init__(self, name: str, config: BanditConfig, num_features: int, num_variants: int,
               run_seed: int, bayesian: bool, shared_history: bool = False):
    """`shared_history`: a seed's variants act as one agent (a particle posterior's particles)
    and train on one history per seed; otherwise each variant has its own."""
    super().__init__(name=name)
    self.config = config
    self.num_seeds = len(config.seeds)
    self.num_variants = num_variants
    self.num_members = self.num_seeds * num_variants
    self.run_seed = run_seed
    self.model = reward_model(config, self.num_members, bayesian,
                              derived_seed(run_seed, _MODEL_STREAM), num_features)
    self.model(tf.zeros([self.num_members, 1, num_features + 1]))
    if bayesian:
      seed_member_streams(self.model, derived_seed(run_seed, _MODEL_STREAM), self.num_members)
    self.shared_history = shared_history
    self.history = History(self.num_seeds if shared_history else self.num_members,
                           config.horizon, num_features)
    # --jit_compile and --noise_chunk_steps: how every training loop of the agent runs.
    self.loop_settings = loop_settings_of(config)
    self.loop = self._training_loop(bayesian)

  def _training_loop(self, bayesian: bool) -> TrainingLoop:
    """What updates the reward models after each reward: the ELBO (or likelihood) by Adam, each
    member on its own batches of its history."""
    kl_fn = None if bayesian else (lambda: tf.zeros([self.num_members]))
    return TrainingLoop(
        ElboObjective(self.model, gaussian_head_log_likelihood, kl_fn=kl_fn),
        GradientUpdate(Adam(self.model.trainable_variables)),
        GroupedBatches(self.history.inputs, self.history.rewards, self.config.batch_size,
                       self.num_members, num_examples=self.history.count),
        data_seed=derived_seed(self.run_seed, _DATA_STREAM), loop_settings=self.loop_settings)

  @property
  def line_names(self) -> list[str]:
    """The name of each variant's line in tables and figures."""
    return [self.name]

  def noise_scales(self) -> dict[str, list[float]]:
    """Per line, each seed's reward noise scale now (a particle agent's: the mean over its
    particles); the fixed scale itself unless --noise_scale=learned."""
    scales = tf.reshape(self.model.noise.noise_scale, [self.num_seeds, self.num_variants]).numpy()
    if len(self.line_names) == self.num_variants:
      return {line: [float(v) for v in scales[:, index]]
              for index, line in enumerate(self.line_names)}
    return {self.line_names[0]: [float(v) for v in scales.mean(axis=1)]}

  def _member_contexts(self, contexts: tf.Tensor) -> tf.Tensor:
    """[seeds, F] -> [members, F]: each seed's context for each of its variants."""
    return tf.repeat(contexts, self.num_variants, axis=0)

  def decide(self, contexts: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """For contexts [seeds, F] at bandit step `step`: [seeds, variants] actions, and the predicted
    reward of eating minus that of passing that the choice was made from (Thompson samplers:
    of their averaged samples; eps_greedy: of its network, whether or not it explored)."""
    raise NotImplementedError

  def choose(self, contexts: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
    """[seeds, variants] actions for contexts [seeds, F] at bandit step `step`."""
    return self.decide(contexts, step)[0]

  @graph_function
  def observe(self, contexts: tf.Tensor, actions: tf.Tensor, rewards: tf.Tensor) -> tf.Tensor:
    """Appends each member's observation and updates its model; returns the last step's
    objective estimate per member (ELBO, or log-likelihood for point weights)."""
    rows = contexts if self.shared_history else self._member_contexts(contexts)
    self.history.append(rows, tf.reshape(actions, [-1]), tf.reshape(rewards, [-1]))
    trace, _ = self.loop.run(tf.constant(self.config.update_steps),
                                  tf.constant(self.config.learning_rate), tf.constant(0.0))
    return trace[-1]


def _greedy(action_means: tf.Tensor) -> tf.Tensor:
  """The action of highest predicted mean, [..., NUM_ACTIONS] -> [...] (ties: pass)."""
  return tf.argmax(action_means, axis=-1, output_type=tf.int32)


def _eat_minus_pass(action_means: tf.Tensor) -> tf.Tensor:
  """[..., NUM_ACTIONS] -> [...]: the predicted reward of eating minus that of passing."""
  return action_means[..., EAT] - action_means[..., PASS]


class ThompsonAgent(Agent):
  """vi_ts and, with `refined`, refined_ts: one member per seed."""

  def __init__(self, config: BanditConfig, num_features: int, run_seed: int, refined: bool):
    super().__init__("refined_ts" if refined else "vi_ts", config, num_features, 1, run_seed,
                     bayesian=True)
    self.refined = refined
    if not refined:
      return
    self.num_samples = self.num_members * config.num_thompson_samples
    self.schedule = AuxiliarySchedule.explicit([config.auxiliary_variance_fraction])

    def samples_model(num_samples: int) -> RewardModel:
      """The samples' network; its initial values never matter: every refinement starts from a
      copy of the model."""
      return reward_model(config, num_samples, True, 0, num_features)
    # Each sample refines on its seed's history: groups of `samples` members share one.
    self.refiner = Refiner(
        samples_model, None, None, gaussian_head_log_likelihood, num_samples=self.num_samples,
        loop_settings=self.loop_settings,
        batches=GroupedBatches(self.history.inputs, self.history.rewards, config.batch_size,
                               self.num_samples, num_examples=self.history.count))
    # Its streams are seeded once and go on from one decision to the next.
    self.refiner.reseed(derived_seed(run_seed, _REFINED_STREAM),
                        derived_seed(run_seed, _AUXILIARY_STREAM),
                        derived_seed(run_seed, _REFINED_STREAM, _DATA_STREAM))

  @property
  def samples(self) -> RewardModel:
    """The refined samples of the latest decision, [seeds * num_thompson_samples] members."""
    return self.refiner.members

  def refine_samples(self) -> RewardModel:
    """Refines `num_thompson_samples` samples per seed from the current q (Algorithm 1, K = 1);
    before the first observation there is nothing to refine on, and q(w | a1) is used as is."""
    num_steps = tf.where(self.history.count > 0, self.config.refine_steps, 0)
    return self.refiner.refine_in_graph(self.model, schedule=self.schedule,
                                        steps_per_auxiliary=num_steps,
                                        learning_rates=[self.config.learning_rate])

  @graph_function
  def decide(self, contexts: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    del step
    samples = self.config.num_thompson_samples
    with weight_noise_scope("per_batch"):
      if self.refined:
        means = self.refine_samples().action_means(
            tf.repeat(contexts, samples, axis=0)[:, tf.newaxis])     # [seeds * samples, 1, A]
        means = tf.reshape(means, [self.num_seeds, samples, NUM_ACTIONS])
      else:
        means = tf.stack([self.model.action_means(contexts[:, tf.newaxis])[:, 0]
                          for _ in range(samples)], axis=1)          # [seeds, samples, A]
    averaged = tf.reduce_mean(means, axis=1)
    return _greedy(averaged)[:, tf.newaxis], _eat_minus_pass(averaged)[:, tf.newaxis]


class EpsilonGreedyAgent(Agent):
  """eps_greedy: one maximum-likelihood network per exploration rate and seed."""

  def __init__(self, config: BanditConfig, num_features: int, run_seed: int):
    super().__init__("eps_greedy", config, num_features, len(config.epsilons), run_seed,
                     bayesian=False)
    self.epsilons = tf.constant(config.epsilons, tf.float32)
    self.explore_seed = derived_seed(run_seed, _EXPLORE_STREAM)

  @property
  def line_names(self) -> list[str]:
    return [f"eps_greedy_{epsilon:g}" for epsilon in self.config.epsilons]

  @graph_function
  def decide(self, contexts: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    means = self.model.action_means(self._member_contexts(contexts)[:, tf.newaxis])[:, 0]
    greedy = tf.reshape(_greedy(means), [self.num_seeds, self.num_variants])
    gaps = tf.reshape(_eat_minus_pass(means), [self.num_seeds, self.num_variants])
    draws = tf.random.stateless_uniform(
        [2, self.num_seeds, self.num_variants],
        seed=tf.stack([tf.constant(self.explore_seed, tf.int64), tf.cast(step, tf.int64)]))
    random_actions = tf.cast(draws[1] * NUM_ACTIONS, tf.int32)
    return tf.where(draws[0] < self.epsilons, random_actions, greedy), gaps


class ParticleThompsonAgent(Agent):
  """svgd_ts and, in function space, fsvgd_ts: `num_particles` point networks per seed moved by
  SVGD (`methods.trainers.particles`) on the seed's history after every reward; a Thompson sample
  is a
  particle drawn uniformly, and the mean of `num_thompson_samples` drawn particles picks the
  action, as vi_ts averages its weight draws. The weights' prior is the other agents' N(0,
  prior_scale^2) (rewards are not standardised here), the noise std's the f-POVI paper's."""

  def __init__(self, config: BanditConfig, num_features: int, run_seed: int,
               function_space: bool):
    self.function_space = FunctionSpaceSettings() if function_space else None
    super().__init__("fsvgd_ts" if function_space else "svgd_ts", config, num_features,
                     config.num_particles, run_seed, bayesian=False, shared_history=True)
    self.choice_seed = derived_seed(run_seed, _EXPLORE_STREAM)

  def _training_loop(self, bayesian: bool) -> TrainingLoop:
    del bayesian
    network = ParticleNetwork(self.model.network_layers, self.model.noise,
                              self.model.network_inputs, self.model.action_value,
                              weight_prior_scale=self.config.prior_scale)
    batches = GroupedBatches(
        self.history.inputs, self.history.rewards,
        particle_batch_rows(self.config.batch_size, self.function_space), self.num_members,
        num_examples=self.history.count, shared_by_group=True)
    return particle_loop(self.model, batches, batch_size=self.config.batch_size,
                         data_seed=derived_seed(self.run_seed, _DATA_STREAM),
                         function_space=self.function_space, network=network,
                         loop_settings=self.loop_settings)

  @graph_function
  def decide(self, contexts: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    means = self.model.action_means(self._member_contexts(contexts)[:, tf.newaxis])[:, 0]
    means = tf.reshape(means, [self.num_seeds, self.num_variants, NUM_ACTIONS])
    drawn = tf.random.stateless_uniform(
        [self.num_seeds, self.config.num_thompson_samples],
        seed=tf.stack([tf.constant(self.choice_seed, tf.int64), tf.cast(step, tf.int64)]),
        maxval=self.num_variants, dtype=tf.int32)
    samples = tf.gather(means, drawn, axis=1, batch_dims=1)          # [seeds, samples, A]
    averaged = tf.reduce_mean(samples, axis=1)
    return _greedy(averaged)[:, tf.newaxis], _eat_minus_pass(averaged)[:, tf.newaxis]


def make_agent(name: str, config: BanditConfig, num_features: int,
               run_seed: Optional[int] = None) -> Agent:
  """The agent called `name` (one of bandits.config.AGENTS) for all of `config.seeds`."""
  run_seed = derived_seed(*config.seeds) if run_seed is None else run_seed
  if name in ("refined_ts", "vi_ts"):
    return ThompsonAgent(config, num_features, run_seed, refined=name == "refined_ts")
  if name == "eps_greedy":
    return EpsilonGreedyAgent(config, num_features, run_seed)
  if name in ("svgd_ts", "fsvgd_ts"):
    return ParticleThompsonAgent(config, num_features, run_seed, function_space=name == "fsvgd_ts")
  raise ValueError(f"unknown agent {name!r}")
