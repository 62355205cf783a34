"""Bandit steps per second of each mushroom-bandit agent at the paper's settings, side by side.

  python -m benchmarks.bandit_speed --output_dir=results/benchmarks/bandit_speed

Every agent (all seeds at once, as `bandits.main` runs them) is built with
the paper's update settings (500 Adam steps per observed reward, 500
refinement steps per refined sample, 3 samples, batches of 64; tests shrink
the step counts with `--update_steps`, `--refine_steps`), its history store
as large as a `--horizon`-step run's, given `--history` observations so that
the compiled calls are traced and the batches come from a real history, and
then timed over `--steps` bandit steps
in interleaved rounds (so machine load hits every agent alike). Reported per
agent: bandit steps per second, seconds in `choose` and in `observe` per step,
the milliseconds per Adam step of each loop, and the hours a run of
`--horizon` steps takes at that speed. Each agent runs under every loop of
`--loops`, in the same interleaved rounds: `per_step` (each Adam step draws its
own noise: `--nojit_compile --noise_chunk_steps=0`) and `compiled` (the bandit
binary's default, `--jit_compile --noise_chunk_steps=100`: noise drawn ahead for
100 steps, the chunk compiled by XLA).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time

import numpy as np
from absl import flags

# TensorFlow and the agents load in the functions that use them: a bad flag is refused at once,
# not after TensorFlow's seconds of start-up.
from bandits import mushroom
from bandits.config import AGENTS, PAPER_AGENTS, BanditConfig
from runner import cli
from common.results import write_results, write_text_atomically

flags.DEFINE_string("output_dir", None, "Where results.json goes.")
flags.DEFINE_integer("steps", 3, "Timed bandit steps per agent and round.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median round is reported.")
flags.DEFINE_integer("history", 10, "Observations each agent has before the timing.")
flags.DEFINE_integer("horizon", 5000, "Bandit steps of the run whose time is projected; each "
                     "agent's history store holds that many rows, as in that run.")
flags.DEFINE_string("data_dir", None, "Directory holding mushroom/agaricus-lepiota.data.")
flags.DEFINE_list("agents", list(PAPER_AGENTS), "Agents to time (any of the bandit binary's).")
flags.DEFINE_list("loops", ["per_step", "compiled"], "Training loops to time: per_step, compiled.")
flags.DEFINE_integer("update_steps", None, "Adam steps per update (default: the paper's).")
flags.DEFINE_integer("refine_steps", None, "Refinement steps per sample (default: the paper's).")
flags.DEFINE_list("seeds", None, "Seeds run at once (default: the binary's five); one seed times "
                  "a run split seed by seed.")

# The bandit binary's loop flags (--jit_compile, --noise_chunk_steps) per timed loop.
LOOPS = {"per_step": dict(jit_compile=False, noise_chunk_steps=0),
         "compiled": dict(jit_compile=True, noise_chunk_steps=100)}


def _one_step(agent, contexts, step: int, rewards) -> tuple[float, float]:
  import tensorflow as tf
  started = time.perf_counter()
  actions = agent.choose(contexts, tf.constant(step, tf.int64)).numpy()
  chosen = time.perf_counter()
  agent.observe(contexts, tf.constant(actions), rewards(actions))
  return chosen - started, time.perf_counter() - chosen


def measure(config: BanditConfig, mushrooms: mushroom.Mushrooms, steps: int, rounds: int,
            history: int, horizon: int, loops: tuple[str, ...] = tuple(LOOPS),
            agent_names: tuple[str, ...] = PAPER_AGENTS) -> dict:
  """{loop: {agent: timings}} for each agent of `agent_names` under each loop of `loops`."""
  import tensorflow as tf
  from bandits.agents import make_agent
  rng = np.random.default_rng(0)
  num_seeds = len(config.seeds)
  agents = {}
  for loop in loops:
    loop_config = dataclasses.replace(config, **LOOPS[loop])
    # Built as the binary builds them: their loops run as the config's loop settings say.
    for name in agent_names:
      agents[loop, name] = make_agent(name, loop_config, mushroom.NUM_FEATURES)

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
  metrics = {loop: {} for loop in loops}
  for (loop, name), measured in timings.items():
    choose = statistics.median(c for c, _ in measured)
    observe = statistics.median(o for _, o in measured)
    step_seconds = choose + observe
    metrics[loop][name] = {
        "bandit_steps_per_second": 1.0 / step_seconds,
        "choose_seconds_per_step": choose,
        "observe_seconds_per_step": observe,
        "update_ms_per_adam_step": 1e3 * observe / config.update_steps,
        "projected_hours_for_horizon": horizon * step_seconds / 3600,
        # What the agent's update loop was built with (not the flags asked for).
        "update_loop_compiled": bool(agents[loop, name].loop.loop_settings.jit_compile),
    }
    if name == "refined_ts":
      metrics[loop][name]["refine_ms_per_adam_step"] = 1e3 * choose / config.refine_steps
  for loop in loops:
    metrics[loop]["all_agents_projected_hours"] = sum(
        row["projected_hours_for_horizon"] for row in metrics[loop].values())
  return metrics


def main(argv):
  del argv
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  for name in ("steps", "rounds", "history", "horizon"):
    cli.require(flags.FLAGS[name].value >= 1, f"{name}={flags.FLAGS[name].value} must be >= 1")
  loops = tuple(flags.FLAGS.loops)
  unknown = [loop for loop in loops if loop not in LOOPS]
  cli.require(bool(loops) and not unknown,
              f"--loops={','.join(loops)}: allowed: some of {', '.join(LOOPS)}")
  agent_names = tuple(flags.FLAGS.agents)
  unknown = [name for name in agent_names if name not in AGENTS]
  cli.require(bool(agent_names) and not unknown,
              f"--agents={','.join(agent_names)}: allowed: some of {', '.join(AGENTS)}")
  overrides = {name: flags.FLAGS[name].value for name in ("update_steps", "refine_steps")
               if flags.FLAGS[name].value is not None}
  if flags.FLAGS.seeds is not None:
    seeds = flags.FLAGS.seeds
    cli.require(bool(seeds) and all(seed.isdigit() for seed in seeds),
                f"--seeds={','.join(seeds)}: allowed: non-negative integers")
    overrides["seeds"] = tuple(int(seed) for seed in seeds)
  # Each agent's history store holds a --horizon run's rows, as in that run (at least the rows
  # this benchmark fills).
  config = BanditConfig(horizon=max(flags.FLAGS.horizon,
                                    flags.FLAGS.history + flags.FLAGS.rounds * flags.FLAGS.steps),
                        **overrides)
  config.validate()
  mushrooms = mushroom.load(flags.FLAGS.data_dir or config.resolved_data_dir)
  started = time.perf_counter()
  metrics = measure(config, mushrooms, flags.FLAGS.steps, flags.FLAGS.rounds,
                    flags.FLAGS.history, flags.FLAGS.horizon, loops, agent_names)
  values = dict(cli.flag_values(["steps", "rounds", "history", "horizon", "loops", "agents"]),
                update_steps=config.update_steps, refine_steps=config.refine_steps,
                seeds=list(config.seeds), num_thompson_samples=config.num_thompson_samples)
  write_results(flags.FLAGS.output_dir, benchmark="benchmarks", dataset="bandit_speed",
                method="all_agents", flags=values, metrics=metrics,
                timings={"total_seconds": time.perf_counter() - started})
  table = speed_table(metrics, flags.FLAGS.horizon, config)
  write_text_atomically(f"{flags.FLAGS.output_dir}/speed.md", table)
  print(table)


def _seeds_phrase(seeds) -> str:
  return f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds at once"


def speed_table(metrics: dict, horizon: int, config: BanditConfig) -> str:
  """speed.md: one row per loop and agent."""
  lines = [f"# Mushroom-bandit agents, {config.update_steps} update and {config.refine_steps} "
           f"refinement steps, {_seeds_phrase(config.seeds)}: speed per loop\n",
           f"Command: `python -m benchmarks.bandit_speed {' '.join(sys.argv[1:])}`\n",
           "| loop | agent | bandit steps/s | update ms/Adam step | refine ms/Adam step "
           f"| hours for {horizon:,} steps |", "|---|---|---|---|---|---|"]
  for loop, agents in metrics.items():
    for name, row in agents.items():
      if name == "all_agents_projected_hours":
        continue
      refine = row.get("refine_ms_per_adam_step")
      lines.append(f"| {loop} | {name} | {row['bandit_steps_per_second']:.3f} "
                   f"| {row['update_ms_per_adam_step']:.2f} "
                   f"| {'' if refine is None else f'{refine:.2f}'} "
                   f"| {row['projected_hours_for_horizon']:.2f} |")
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  cli.run(main)
