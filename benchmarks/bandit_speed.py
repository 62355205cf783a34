"""Bandit steps per second of each mushroom-bandit agent at the paper's settings, side by side.

  python -m benchmarks.bandit_speed --output_dir=results/benchmarks/bandit_speed

Every agent (all seeds at once, as `bandits.main` runs them) is built with
the paper's update settings (500 Adam steps per observed reward, 500
refinement steps per refined sample, 3 samples, batches of 64), given
`--history` observations so that the compiled calls are traced and the
batches come from a real history, and then timed over `--steps` bandit steps
in interleaved rounds (so machine load hits every agent alike). Reported per
agent: bandit steps per second, seconds in `choose` and in `observe` per step,
the milliseconds per Adam step of each loop, and the hours a run of
`--horizon` steps takes at that speed.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import tensorflow as tf
from absl import flags

from auxiliary_sampling.loop_settings import loop_settings_scope
from bandits import mushroom
from bandits.agents import make_agent
from bandits.config import AGENTS, BanditConfig
from common import cli
from common.distribution import loop_settings_of
from common.results import write_results

flags.DEFINE_string("output_dir", None, "Where results.json goes.")
flags.DEFINE_integer("steps", 3, "Timed bandit steps per agent and round.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median round is reported.")
flags.DEFINE_integer("history", 10, "Observations each agent has before the timing.")
flags.DEFINE_integer("horizon", 5000, "Horizon of the projected run time.")
flags.DEFINE_string("data_dir", None, "Directory holding mushroom/agaricus-lepiota.data.")


def _one_step(agent, contexts, step: int, rewards) -> tuple[float, float]:
  started = time.perf_counter()
  actions = agent.choose(contexts, tf.constant(step, tf.int64)).numpy()
  chosen = time.perf_counter()
  agent.observe(contexts, tf.constant(actions), rewards(actions))
  return chosen - started, time.perf_counter() - chosen


def measure(config: BanditConfig, mushrooms: mushroom.Mushrooms, steps: int, rounds: int,
            history: int, horizon: int) -> dict:
  rng = np.random.default_rng(0)
  num_seeds = len(config.seeds)
  # Built as the binary builds them: under the config's loop settings (compiled chunks).
  with loop_settings_scope(loop_settings_of(config)):
    agents = {name: make_agent(name, config, mushroom.NUM_FEATURES) for name in AGENTS}

  def contexts_and_rewards():
    rows = rng.integers(0, len(mushrooms.edible), num_seeds)
    unlucky = rng.random(num_seeds)[:, None] < 0.5
    edible = mushrooms.edible[rows][:, None]
    return (tf.constant(mushrooms.contexts[rows]),
            lambda actions: tf.constant(mushroom.rewards(edible, unlucky, actions)))

  for agent in agents.values():   # warm-up: traces, and fills the history
    for step in range(history):
      contexts, rewards = contexts_and_rewards()
      _one_step(agent, contexts, step, rewards)
  timings = {name: [] for name in agents}
  for _ in range(rounds):
    for name, agent in agents.items():
      choose_seconds, observe_seconds = [], []
      for step in range(steps):
        contexts, rewards = contexts_and_rewards()
        chose, observed = _one_step(agent, contexts, history + step, rewards)
        choose_seconds.append(chose)
        observe_seconds.append(observed)
      timings[name].append((float(np.mean(choose_seconds)), float(np.mean(observe_seconds))))
  metrics = {}
  for name, measured in timings.items():
    choose = statistics.median(c for c, _ in measured)
    observe = statistics.median(o for _, o in measured)
    step_seconds = choose + observe
    metrics[name] = {
        "bandit_steps_per_second": 1.0 / step_seconds,
        "choose_seconds_per_step": choose,
        "observe_seconds_per_step": observe,
        "update_ms_per_adam_step": 1e3 * observe / config.update_steps,
        "projected_hours_for_horizon": horizon * step_seconds / 3600,
    }
    if name == "refined_ts":
      metrics[name]["refine_ms_per_adam_step"] = 1e3 * choose / config.refine_steps
  metrics["all_agents_projected_hours"] = sum(
      metrics[name]["projected_hours_for_horizon"] for name in agents)
  return metrics


def main(argv):
  del argv
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  for name in ("steps", "rounds", "history", "horizon"):
    cli.require(flags.FLAGS[name].value >= 1, f"{name}={flags.FLAGS[name].value} must be >= 1")
  config = BanditConfig(horizon=flags.FLAGS.history + flags.FLAGS.rounds * flags.FLAGS.steps)
  mushrooms = mushroom.load(flags.FLAGS.data_dir or config.resolved_data_dir)
  started = time.perf_counter()
  metrics = measure(config, mushrooms, flags.FLAGS.steps, flags.FLAGS.rounds,
                    flags.FLAGS.history, flags.FLAGS.horizon)
  values = dict(cli.flag_values(["steps", "rounds", "history", "horizon"]),
                update_steps=config.update_steps, refine_steps=config.refine_steps,
                seeds=list(config.seeds), num_thompson_samples=config.num_thompson_samples)
  write_results(flags.FLAGS.output_dir, benchmark="benchmarks", dataset="bandit_speed",
                method="all_agents", flags=values, metrics=metrics,
                timings={"total_seconds": time.perf_counter() - started})
  for name, value in metrics.items():
    print(f"{name}: {value}")


if __name__ == "__main__":
  cli.run(main)
