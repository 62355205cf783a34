"""How good a Thompson sample is at a fixed history: refined against mean-field samples.

The bandit's cumulative regret mixes the quality of each posterior sample
with the history it made the agent collect. This measures the first alone:
for each seed, `num_observations` mushrooms with uniformly random actions
and their rewards, the mean-field reward model trained on them for
`training_steps` Adam steps, then `rounds` rounds of samples, each round one
mean-field draw per seed and Thompson sample and one refined draw (Algorithm 1,
K = 1, `refine_steps` steps), all made by the bandit's own agents. Every
sample acts greedily on all 8,124 mushrooms, which gives:

  one_sample_regret   expected regret per mushroom of acting on a single sample
                      (Thompson sampling's one-step regret at this history);
  averaged_regret     the same for the mean of `num_thompson_samples` samples
                      (what the agents act on);
  eat_reward_rmse     RMSE of the sample's predicted reward for eating against
                      the expected one (+5 edible, -15 poisonous);
  eat_reward_spread   std over samples of that prediction, averaged over
                      mushrooms: how widely the samples explore.

  python -m bandits.sample_quality --num_observations=500 --training_steps=5000 \
      --refine_steps=500 --output_dir=results/bandits/sample_quality/n500
"""
from __future__ import annotations

import dataclasses
import time

from bandits.config import BanditConfig
from runner import cli
from common.config import setting


@dataclasses.dataclass
class SampleQualityConfig(BanditConfig):
  """A bandit configuration (reward model, refinement) plus the fixed history to measure at."""

  num_observations: int = setting(500, "Random-action observations per seed in the history.",
                                  minimum=1)
  training_steps: int = setting(5000, "Adam steps of the mean-field model on the history.",
                                minimum=1)
  rounds: int = setting(10, "Rounds of samples; each draws num_thompson_samples per seed.",
                        minimum=1)


def _regret_and_errors(eat_means, edible):
  """Per sample [..., mushrooms] predicted eat rewards -> (expected regret, squared error of the
  eat reward), both [..., mushrooms]. Acting on a sample: eat when its eat reward beats 0."""
  import numpy as np
  from bandits import mushroom
  eat = eat_means > mushroom.REWARD_PASS
  actions = np.where(eat, mushroom.EAT, mushroom.PASS)
  optimal = mushroom.expected_rewards(edible, mushroom.optimal_actions(edible))
  regret = optimal - mushroom.expected_rewards(edible, actions)
  truth = mushroom.expected_rewards(edible, np.full_like(actions, mushroom.EAT))
  return regret, (eat_means - truth) ** 2


def measure(config: SampleQualityConfig, mushrooms) -> dict:
  """The four measures above for mean-field (vi_ts) and refined (refined_ts) samples."""
  import numpy as np
  import tensorflow as tf
  from bandits import mushroom
  from bandits.agents import ThompsonAgent
  from auxiliary_sampling.graph_loops import graph_function
  from auxiliary_sampling.weight_noise import weight_noise_scope

  seeds = np.array(config.seeds)
  history_config = dataclasses.replace(config, horizon=config.num_observations)
  agent = ThompsonAgent(history_config, mushroom.NUM_FEATURES, run_seed=int(seeds.sum()),
                        refined=True)
  stream = mushroom.EnvironmentStream.draw(seeds, config.num_observations,
                                           len(mushrooms.edible))
  actions = np.stack([np.random.default_rng([int(s), 1]).integers(0, mushroom.NUM_ACTIONS,
                                                                  config.num_observations)
                      for s in seeds])
  edible = mushrooms.edible[stream.rows]
  rewards = mushroom.rewards(edible, stream.unlucky, actions)
  contexts = mushrooms.contexts[stream.rows]
  agent.history.inputs.assign(np.concatenate([contexts, actions[..., None]], -1)
                              .astype(np.float32))
  agent.history.rewards.assign(rewards[..., None])
  agent.history.count.assign(config.num_observations)
  trace, _ = agent.loop.run(tf.constant(config.training_steps),
                                 tf.constant(config.learning_rate), tf.constant(0.0))
  all_contexts = tf.constant(mushrooms.contexts, tf.float32)
  samples = config.num_thompson_samples
  num_seeds = len(seeds)

  @graph_function
  def vi_eat_means():
    with weight_noise_scope("per_batch"):
      means = tf.stack([agent.model.action_means(
          tf.broadcast_to(all_contexts, [num_seeds] + all_contexts.shape.as_list()))
                        for _ in range(samples)], axis=1)          # [seeds, samples, n, A]
    return means[..., mushroom.EAT]

  @graph_function
  def refined_eat_means():
    with weight_noise_scope("per_batch"):
      means = agent.refine_samples().action_means(tf.broadcast_to(
          all_contexts, [num_seeds * samples] + all_contexts.shape.as_list()))
    return tf.reshape(means[..., mushroom.EAT], [num_seeds, samples, -1])

  results = {"final_training_elbo_per_seed": trace[-1].numpy().tolist()}
  for name, draw in (("vi_ts", vi_eat_means), ("refined_ts", refined_eat_means)):
    started = time.perf_counter()
    eat_means = np.concatenate([draw().numpy() for _ in range(config.rounds)], axis=1)
    one_regret, squared_error = _regret_and_errors(eat_means, mushrooms.edible)
    rounds_means = eat_means.reshape(num_seeds, config.rounds, samples, -1).mean(axis=2)
    averaged_regret, _ = _regret_and_errors(rounds_means, mushrooms.edible)
    per_seed = {
        "one_sample_regret": one_regret.mean(axis=(1, 2)),
        "averaged_regret": averaged_regret.mean(axis=(1, 2)),
        "eat_reward_rmse": np.sqrt(squared_error.mean(axis=(1, 2))),
        "eat_reward_spread": eat_means.std(axis=1).mean(axis=-1),
    }
    results[name] = {key: {"mean": float(value.mean()), "std_over_seeds": float(value.std()),
                           "per_seed": value.tolist()} for key, value in per_seed.items()}
    results[name]["seconds"] = time.perf_counter() - started
  return results


@cli.runs_under_its_device_settings
def train_and_evaluate(config: SampleQualityConfig, output_dir: str) -> dict:
  """Writes results.json with `measure`'s numbers."""
  from bandits import mushroom
  from common.results import write_results
  from common.seeding import seed_everything

  config.validate()
  started = time.perf_counter()
  seed_everything(config.seeds[0])
  mushrooms = mushroom.load(config.resolved_data_dir, config.download)
  metrics = measure(config, mushrooms)
  write_results(output_dir, benchmark="bandits", dataset="mushroom",
                method="sample_quality", metrics=metrics,
                timings={"total_seconds": time.perf_counter() - started},
                flags=config.as_dict())
  return metrics


if __name__ == "__main__":
  cli.main(SampleQualityConfig, train_and_evaluate, printed_metrics=())
