"""The mushroom contextual bandit (paper Section 4.3, Figure 5): Thompson sampling with refined
and with mean-field samples against epsilon-greedy, every seed at once.

  python -m bandits.main --output_dir=results/bandits/mushroom            # paper settings
  python -m bandits.main --agents=refined_ts --seeds=0,1,2,3,4 --horizon=5000 --output_dir=...

Each agent runs over the horizon in turn (its checkpoints under
`output_dir/checkpoints/<agent>`, resumed after a kill) and leaves its regret
record `regret_<agent>.npz`; then results.json (final and periodic
cumulative regret per line), Figure 5 and its table are written from the
records. Runs of different agents in different directories combine with
`python -m bandits.figure`.
"""
from __future__ import annotations

import os
import time

from bandits.config import BanditConfig
from runner import cli


@cli.runs_under_its_device_settings
def train_and_evaluate(config: BanditConfig, output_dir: str) -> dict:
  """Runs every agent of `config` and writes results.json, Figure 5 and its table."""
  # TensorFlow loads here, after the flags have been checked.
  import numpy as np
  from bandits import mushroom
  from bandits.agents import make_agent
  from bandits.figure import RECORD_FILENAME, write_figure_and_table
  from bandits.interaction import interact
  from common.results import write_results
  from common.seeding import seed_everything

  config.validate()
  started = time.perf_counter()
  seed_everything(config.seeds[0])
  mushrooms = mushroom.load(config.resolved_data_dir, config.download)
  stream = mushroom.EnvironmentStream.draw(np.array(config.seeds), config.horizon,
                                           len(mushrooms.edible), config.stream_horizon)
  records, timings, noise_scales = [], {}, {}
  for name in config.agents:
    agent = make_agent(name, config, mushroom.NUM_FEATURES)
    record = interact(agent, mushrooms, stream, config,
                      os.path.join(output_dir, "checkpoints", name))
    record.save(os.path.join(output_dir, RECORD_FILENAME.format(agent=name)))
    records.append(record)
    if config.fixed_noise_scale is None:
      noise_scales.update(agent.noise_scales())
    timings[f"{name}_seconds"] = record.seconds
    timings[f"{name}_steps_per_second"] = config.horizon / record.seconds
  metrics = {"seeds": list(config.seeds), "horizon": config.horizon}
  lines = {}
  for record in records:
    lines.update(record.metrics(config.regret_report_interval))
  for key in ("cumulative_regret", "cumulative_regret_std", "cumulative_realised_regret",
              "regret_at_steps", "cumulative_regret_per_seed", "eat_fraction"):
    metrics[key] = {line: values[key] for line, values in lines.items()}
  if noise_scales:
    metrics["final_noise_scale_per_seed"] = noise_scales
  write_figure_and_table(records, output_dir, config.regret_report_interval)
  timings["total_seconds"] = time.perf_counter() - started
  write_results(output_dir, benchmark="bandits", dataset="mushroom",
                method=",".join(config.agents), metrics=metrics, timings=timings,
                flags=config.as_dict())
  return metrics


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = BanditConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate, printed_metrics=("cumulative_regret",))
