"""An agent's interaction with the environment stream: the bandit loop, its checkpoints and the
regret record it leaves.

Each step shows every seed's mushroom, asks the agent for actions, pays the
rewards and lets the agent observe them. The loop resumes from the agent's
last checkpoint (model, optimiser, history, random-stream counters and the
record so far), so a killed run continues exactly where it stopped.
"""
from __future__ import annotations

import dataclasses
import os
import time
import zipfile
import zlib
from typing import Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from auxiliary_sampling.progress import ProgressLog
from bandits import mushroom
from bandits.agents import Agent
from bandits.config import BanditConfig
from runner.checkpoint_settings import claim_checkpoint_dir
from common.config import absent_values


def reported_steps(horizon: int, report_interval: int) -> list[int]:
  """Every `report_interval`-th step, and the horizon."""
  steps = list(range(report_interval, horizon + 1, report_interval))
  return steps if steps and steps[-1] == horizon else steps + [horizon]


@dataclasses.dataclass
class RegretRecord:
  """What happened, [seeds, lines, steps]: actions, realised rewards, per-step regrets against
  the omniscient agent (expected: the luck of poisonous mushrooms averaged out), and the
  predicted reward of eating minus passing each action was chosen from (None in records made
  before it was kept)."""
  line_names: list[str]
  seeds: list[int]
  actions: np.ndarray
  rewards: np.ndarray
  expected_regret: np.ndarray
  realised_regret: np.ndarray
  seconds: float
  predicted_gap: Optional[np.ndarray] = None

  def cumulative(self, realised: bool = False) -> np.ndarray:
    return np.cumsum(self.realised_regret if realised else self.expected_regret, axis=-1)

  def metrics(self, report_interval: int) -> Mapping[str, dict]:
    """Per line: final cumulative regret (mean and std over seeds, and per seed), realised regret,
    the regret every `report_interval` steps, and the fraction of mushrooms eaten."""
    expected, realised = self.cumulative(), self.cumulative(realised=True)
    horizon = expected.shape[-1]
    report_steps = reported_steps(horizon, report_interval)
    lines = {}
    for index, name in enumerate(self.line_names):
      lines[name] = {
          "cumulative_regret": float(np.mean(expected[:, index, -1])),
          "cumulative_regret_std": float(np.std(expected[:, index, -1])),
          "cumulative_regret_per_seed": [float(v) for v in expected[:, index, -1]],
          "cumulative_realised_regret": float(np.mean(realised[:, index, -1])),
          "regret_at_steps": {str(step): float(np.mean(expected[:, index, step - 1]))
                              for step in report_steps},
          "eat_fraction": float(np.mean(self.actions[:, index] == mushroom.EAT)),
      }
    return lines

  def save(self, path: str) -> None:
    """Writes the record as a compressed .npz, atomically."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as handle:
      np.savez_compressed(handle, line_names=np.array(self.line_names), seeds=np.array(self.seeds),
                          actions=self.actions.astype(np.int8), rewards=self.rewards,
                          expected_regret=self.expected_regret.astype(np.float32),
                          realised_regret=self.realised_regret.astype(np.float32),
                          seconds=np.float64(self.seconds),
                          **({} if self.predicted_gap is None
                             else {"predicted_gap": self.predicted_gap.astype(np.float32)}))
    os.replace(temporary, path)

  @classmethod
  def over_seeds(cls, records: Sequence["RegretRecord"]) -> "RegretRecord":
    """One record of the union of the seeds of `records` (one agent's runs over disjoint seeds:
    a seed's environment stream does not depend on the others), ordered by seed; ValueError if
    a seed repeats or the lines or horizons differ. `seconds` is the runs' sum."""
    seeds = [seed for record in records for seed in record.seeds]
    if len(set(seeds)) != len(seeds):
      raise ValueError(f"seeds {seeds} repeat; allowed: runs over disjoint seeds")
    for record in records[1:]:
      if (record.line_names != records[0].line_names
          or record.expected_regret.shape[1:] != records[0].expected_regret.shape[1:]):
        raise ValueError(f"lines {record.line_names} over {record.expected_regret.shape[-1]} "
                         f"steps differ from {records[0].line_names} over "
                         f"{records[0].expected_regret.shape[-1]}; allowed: the same agent "
                         "and horizon")
    order = np.argsort(seeds)

    def joined(name: str) -> np.ndarray:
      return np.concatenate([getattr(record, name) for record in records])[order]
    has_gaps = all(record.predicted_gap is not None for record in records)
    return cls(line_names=list(records[0].line_names), seeds=[seeds[i] for i in order],
               actions=joined("actions"), rewards=joined("rewards"),
               expected_regret=joined("expected_regret"),
               realised_regret=joined("realised_regret"),
               seconds=float(sum(record.seconds for record in records)),
               predicted_gap=joined("predicted_gap") if has_gaps else None)

  @classmethod
  def load(cls, path: str) -> "RegretRecord":
    """The record `save` wrote at `path`; RuntimeError in one line if the file is not one (cut
    short, overwritten, its arrays missing or of disagreeing shapes)."""
    try:
      with np.load(path) as saved:
        record = cls(line_names=[str(n) for n in saved["line_names"]],
                     seeds=[int(s) for s in saved["seeds"]], actions=saved["actions"],
                     rewards=saved["rewards"], expected_regret=saved["expected_regret"],
                     realised_regret=saved["realised_regret"], seconds=float(saved["seconds"]),
                     predicted_gap=(saved["predicted_gap"] if "predicted_gap" in saved.files
                                    else None))
    except (OSError, EOFError, KeyError, ValueError, TypeError, OverflowError, zipfile.BadZipFile,
            zlib.error) as error:
      raise RuntimeError(f"{path} is not a regret record ({type(error).__name__}: {error}); "
                         "allowed: regret_<agent>.npz as bandits.main writes it") from None
    shape = (len(record.seeds), len(record.line_names))
    arrays = ("actions", "rewards", "expected_regret", "realised_regret") + (
        () if record.predicted_gap is None else ("predicted_gap",))
    shapes = {name: getattr(record, name).shape for name in arrays}
    if any(len(found) != 3 or found[:2] != shape or found != shapes["actions"]
           for found in shapes.values()):
      raise RuntimeError(f"{path} is not a regret record: arrays of shapes {shapes} for "
                         f"{shape[0]} seed(s) and {shape[1]} line(s); allowed: all "
                         "[seeds, lines, steps], as bandits.main writes them")
    return record


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
