"""Settings of the mushroom bandit run (paper Section 4.3, Figure 5); the binary's flags."""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional

from common.config import (NOTHING, UsageError, data_dir_setting, download_setting, setting,
                           with_default)
from bandits import mushroom
from common.distribution import DeviceConfig

AGENTS = ("refined_ts", "vi_ts", "eps_greedy", "svgd_ts", "fsvgd_ts")
PARTICLE_AGENTS = ("svgd_ts", "fsvgd_ts")
# methods.trainers.gaussian_head.MINIMUM_SCALE (not imported: this module must not load TensorFlow).
MINIMUM_NOISE_SCALE = 1e-3
# The agents run when --agents is not given (the paper's Figure 5).
PAPER_AGENTS = ("refined_ts", "vi_ts", "eps_greedy")
REWARD_MODELS = ("per_action", "action_input")


@dataclasses.dataclass
class BanditConfig(DeviceConfig):
  """One run: the listed agents, every seed at once (the seeds are a member axis). On several
  replicas (--use_gpu, --tpu, --multi_worker) every update's and refinement's minibatch is split
  over them, as the other binaries split theirs."""

  agents: tuple[str, ...] = setting(
      PAPER_AGENTS, "Agents to run, one after another: refined_ts (Thompson sampling with refined "
      "samples), vi_ts (with mean-field samples), eps_greedy (on the maximum-likelihood network, "
      "one line per --epsilons value), svgd_ts and fsvgd_ts (with particles moved by weight- or "
      "function-space SVGD; not in the paper).", choices=AGENTS)
  seeds: tuple[int, ...] = setting(
      (0, 1, 2, 3, 4), "Seeds, run together as one vectorised computation. Seed s fixes the "
      "environment stream (mushrooms shown, luck of poisonous ones), the same for every agent "
      "whose stream is drawn for the same length (--stream_horizon).",
      minimum=0)
  horizon: int = setting(5000, "Bandit steps (mushrooms shown) per seed.", minimum=1)
  stream_horizon: int = setting(
      0, "Steps each seed's environment stream is drawn for, of which the run meets the first "
      "--horizon (0: --horizon). The luck depends on this length, so a shorter run is paired step "
      "for step with a longer one only at the longer one's length.", minimum=0)
  update_steps: int = setting(
      500, "Adam steps that update each reward model after every observed reward (paper: 500).",
      minimum=1)
  refine_steps: int = setting(
      500, "Adam steps refining q(a2 | a1) before each refined sample is used (paper: 500).",
      minimum=1)
  batch_size: int = setting(64, "Rewards per Adam step, drawn from the whole history (paper: 64).",
                            minimum=1)
  learning_rate: float = setting(1e-3, "Adam learning rate of the updates and of refinement.",
                                 above=0)
  num_thompson_samples: int = setting(
      3, "Posterior samples whose predicted rewards are averaged to pick each action (paper: 3).",
      minimum=1)
  auxiliary_variance_fraction: float = setting(
      0.7, "Prior variance of a1 as a fraction of the prior's (paper: w = a1 + a2, "
      "p(a1) = N(0, 0.7), p(a2) = N(0, 0.3)).", above=0, below=1)
  num_particles: int = setting(
      20, "svgd_ts, fsvgd_ts: particles (networks) per seed (the f-POVI paper's 20).", minimum=2,
      maximum=1000)
  epsilons: tuple[float, ...] = setting(
      (0.01, 0.05, 0.1), "Exploration rates of eps_greedy, each its own line.", minimum=0,
      maximum=1)
  hidden_units: int = setting(100, "Units of each hidden ReLU layer (paper: 100).", minimum=1)
  num_hidden_layers: int = setting(2, "Hidden layers (paper: 2).", minimum=1)
  prior_scale: float = setting(1.0, "Scale of the fixed N(0, s^2) prior on every weight "
                               "(paper: standard Gaussian).", above=0)
  reward_model: str = setting(
      "per_action", "per_action: the context in, one predicted reward per action out (the deep "
      "contextual bandits benchmark's networks); action_input: context and action in, one "
      "predicted reward out (the paper's description).", choices=REWARD_MODELS)
  noise_scale: str = setting(
      "learned", "Reward noise scale of the Gaussian likelihood, in reward units: a positive "
      "number fixes it for every agent's updates and refinement; learned: a point estimate per "
      "network trained with the updates from --initial_noise_scale (svgd_ts and fsvgd_ts always "
      "learn theirs).", absent_means="learned")
  initial_noise_scale: float = setting(
      5.0, "With --noise_scale=learned: the reward noise scale's starting value.", above=0.001,
      only_when=("noise_scale", "learned"))
  initial_untransformed_posterior_scale: float = setting(
      -5.0, "Initial softplus^-1 of the posterior scales (std 0.0067 at -5).")
  initial_pulls: int = setting(
      0, "Steps that pull each action this many times before the agents choose (pass, eat, "
      "pass, ...; every agent learns from their rewards as from its own choices); 0: the agents "
      "choose from the first step, as the paper describes. The deep contextual bandits benchmark "
      "pulls each action twice.", minimum=0, maximum=100)
  regret_report_interval: int = setting(
      1000, "results.json reports the cumulative regret every this many steps.", minimum=1)
  steps_per_checkpoint: int = setting(
      100, "Bandit steps between checkpoints (the run resumes from the last one).", minimum=1,
      shapes=NOTHING)
  data_dir: str = data_dir_setting("mushroom/agaricus-lepiota.data", "$REFINED_VI_DATA_DIR")
  download: bool = download_setting()
  # Each bandit step runs 500-step loops of a small network, compiled once and reused: with the
  # noise drawn ahead and the chunks compiled, vi_ts runs 1.7x and refined_ts 1.5x faster
  # (benchmarks.bandit_speed). --nojit_compile --noise_chunk_steps=0 gives the per-step draws
  # of runs made before this default.
  jit_compile: bool = with_default(DeviceConfig, "jit_compile", True)
  noise_chunk_steps: int = with_default(DeviceConfig, "noise_chunk_steps", 100)
  intra_op_threads: int = with_default(DeviceConfig, "intra_op_threads", 0)

  def check(self) -> None:
    super().check()
    scale = self.fixed_noise_scale   # refuses a value that is neither a number nor "learned"
    if scale is not None and set(self.agents) & set(PARTICLE_AGENTS):
      raise UsageError(f"noise_scale={self.noise_scale} with agents "
                       f"{','.join(a for a in self.agents if a in PARTICLE_AGENTS)}; allowed: "
                       "noise_scale=learned for svgd_ts and fsvgd_ts (their noise has a prior)")
    if self.stream_horizon and self.stream_horizon < self.horizon:
      raise UsageError(f"stream_horizon={self.stream_horizon} is below horizon={self.horizon}; "
                       "allowed: 0 or at least the horizon")
    for name in ("agents", "seeds", "epsilons"):
      values = getattr(self, name)
      if len(set(values)) != len(values):
        raise UsageError(f"{name}={','.join(map(str, values))} repeats a value; allowed: "
                         "distinct values")

  def check_replicas(self, num_replicas: int) -> None:
    """Every update's minibatch (--batch_size rewards) must split evenly over the replicas."""
    super().check_replicas(num_replicas)
    if self.batch_size % num_replicas:
      raise UsageError(f"--batch_size={self.batch_size} does not split evenly over "
                       f"{num_replicas} replicas; allowed: a multiple of {num_replicas}")

  @property
  def fixed_noise_scale(self) -> Optional[float]:
    """--noise_scale as a number, or None when it is learned; UsageError for anything else."""
    if self.noise_scale == "learned":
      return None
    try:
      scale = float(self.noise_scale)
    except (TypeError, ValueError):
      scale = math.nan
    if not (math.isfinite(scale) and scale > MINIMUM_NOISE_SCALE):
      raise UsageError(f"noise_scale={self.noise_scale!r} is not allowed; allowed: learned, or a "
                       f"finite number > {MINIMUM_NOISE_SCALE:g}")
    return scale

  @property
  def resolved_data_dir(self) -> Optional[str]:
    """--data_dir, else $REFINED_VI_DATA_DIR (CI and these machines), else None."""
    return self.data_dir or os.environ.get("REFINED_VI_DATA_DIR") or None

  def locate_data(self) -> None:
    mushroom.locate(self.resolved_data_dir, self.download)
