"""An agent's interaction with the environment stream: the bandit loop, its checkpoints and the
regret record it leaves.

Each step shows every seed's mushroom, asks the agent for actions, pays the
rewards and lets the agent observe them. The loop resumes from the agent's
last checkpoint (model, optimiser, history, random-stream counters and the
record so far), so a killed run continues exactly where it stopped.
"""
from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from absl import logging

from auxiliary_sampling.progress import ProgressLog
from bandits import mushroom
from bandits.agents import Agent
from bandits.config import BanditConfig
# TensorFlow-free, for the figure and reports; still importable from here.
from bandits.regret_record import RegretRecord, reported_steps  # noqa: F401
from runner.checkpoint_settings import claim_checkpoint_dir
from common.config import absent_values


class _CheckpointedRecord(tf.Module):
  """The loop's own state in the checkpoint: step, record so far, wall time."""

  def __init__(self, num_seeds: int, num_lines: int, horizon: int):
    super().__init__(name="record")
    shape = [num_seeds, num_lines, horizon]
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
    self.actions = tf.Variable(tf.zeros(shape, tf.int32), trainable=False)
    self.rewards = tf.Variable(tf.zeros(shape), trainable=False)
    self.predicted_gap = tf.Variable(tf.zeros(shape), trainable=False)


def interact(agent: Agent, mushrooms: mushroom.Mushrooms, stream: mushroom.EnvironmentStream,
             config: BanditConfig, checkpoint_dir: str) -> RegretRecord:
  """Runs `agent` over the stream to the horizon, resuming from and saving to `checkpoint_dir`;
  the first 2 * `config.initial_pulls` steps take `forced_action`'s actions, not the agent's."""
  claim_checkpoint_dir(checkpoint_dir, dict(config.identity(), agent=agent.name),
                       config.replace_mismatched, absent_values(config))
  num_seeds, horizon = len(config.seeds), config.horizon
  lines = len(agent.line_names)
  record = _CheckpointedRecord(num_seeds, lines, horizon)
  checkpoint = tf.train.Checkpoint(agent=agent, record=record)
  manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=1)
  if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    logging.info("%s: resumed at step %d from %s", agent.name, int(record.step.numpy()),
                 manager.latest_checkpoint)
  actions, rewards = record.actions.numpy(), record.rewards.numpy()
  gaps = record.predicted_gap.numpy()
  start = int(record.step.numpy())
  progress = ProgressLog(agent.name, horizon, start, value_name="mean cumulative regret")
  started, seconds_before = time.perf_counter(), float(record.seconds.numpy())
  edible_rows = mushrooms.edible[stream.rows]
  contexts_of = tf.constant(mushrooms.contexts)
  for step in range(start, horizon):
    contexts = tf.gather(contexts_of, stream.rows[:, step])
    chosen, gap = (t.numpy() for t in agent.decide(contexts, tf.constant(step, tf.int64)))
    if step < mushroom.NUM_ACTIONS * config.initial_pulls:   # the action every seed must pull
      chosen = np.full_like(chosen, forced_action(step))
    paid = mushroom.rewards(edible_rows[:, step, None], stream.unlucky[:, step, None], chosen)
    objective = agent.observe(contexts, tf.constant(chosen), tf.constant(paid)).numpy()
    _check_finite(agent.name, step + 1, gap, objective)
    actions[:, :, step], rewards[:, :, step], gaps[:, :, step] = chosen, paid, gap
    done = step + 1
    checkpoint_due = done % config.steps_per_checkpoint == 0 or done == horizon
    if checkpoint_due:
      record.actions.assign(actions)
      record.rewards.assign(rewards)
      record.predicted_gap.assign(gaps)
      record.step.assign(done)
      record.seconds.assign(seconds_before + time.perf_counter() - started)
      manager.save(checkpoint_number=done)
    # A line at every checkpoint, and about every PROGRESS_SECONDS between them.
    if checkpoint_due or progress.due():
      expected = _expected_regret(edible_rows[:, None, :done], actions[:, :, :done])
      progress.log(done, float(np.mean(np.sum(expected, axis=-1))))
  edible = edible_rows[:, None, :]
  expected_regret = _expected_regret(edible, actions)
  optimal_reward = mushroom.expected_rewards(edible, mushroom.optimal_actions(edible))
  return RegretRecord(line_names=agent.line_names, seeds=list(config.seeds), actions=actions,
                      rewards=rewards, expected_regret=expected_regret,
                      realised_regret=optimal_reward - rewards,
                      seconds=float(record.seconds.numpy()), predicted_gap=gaps)


def forced_action(step: int) -> int:
  """The action of bandit step `step` of the initial pulls: pass, eat, pass, eat, ... (the
  deep contextual bandits benchmark's order, its action `step mod 2`)."""
  return step % mushroom.NUM_ACTIONS


def _check_finite(agent: str, step: int, gap: np.ndarray, objective: np.ndarray) -> None:
  """FloatingPointError (exit 1, nothing written) if a model has diverged at bandit step `step`:
  its predicted rewards or its last update's objective are not finite. A diverged network picks
  "pass" for every mushroom, which would otherwise pass for a result."""
  for name, values in (("predicted rewards", gap), ("ELBO", objective)):
    bad = ~np.isfinite(values)
    if bad.any():
      raise FloatingPointError(f"{agent}: non-finite {name} at bandit step {step} "
                               f"({int(bad.sum())} of {bad.size} members); the model diverged")


def _expected_regret(edible: np.ndarray, actions: np.ndarray) -> np.ndarray:
  """The omniscient agent's expected reward minus that of `actions`, per step."""
  return (mushroom.expected_rewards(edible, mushroom.optimal_actions(edible))
          - mushroom.expected_rewards(edible, actions))
