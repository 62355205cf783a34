"""What a refinement returns: the refined samples and the bookkeeping of Algorithm 1.

Both engines, `refine.refine` (Gaussian mean-field networks) and
`non_gaussian_refinement.refine_non_gaussian` (Normal / Cauchy auxiliaries of
any log joint), return this type with the same meaning in every field.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class RefinementResult:
  """M refined sample paths; every per-member array has the member axis last."""

  # refine(): the M refined members, model(x) -> [M, batch, ...];
  # refine_non_gaussian(): its NonGaussianRefinement (q(r) and the fixed auxiliaries).
  model: tf.Module
  elbo_aux: np.ndarray           # [M] ELBO_aux (paper Eq. 13) of each member's sample path
  initial_elbo: np.ndarray       # [M] estimates of the starting mean-field model's ELBO
  log_ratios: np.ndarray         # [conditioning steps, M] log q_{k-1}(a_k) - log p(a_k)
  trace: np.ndarray              # [steps, M] ELBO_aux estimate after every Adam step
  learning_rates: list[float]    # Adam's learning rate per fit (refine(): per auxiliary variable)
  # refine_seconds (optimisation wall time, tracing included), total_seconds, and for refine()
  # with K > 1 trace_seconds: the first stage's time beyond a later stage's (tracing, compiling).
  timings: dict[str, float]
  stage_elbo_aux: Optional[np.ndarray] = None   # [K, M] refine(): whole-data ELBO_aux per stage
  # [M] refine() with stage_elbo_examples: the start's ELBO on the stage subset (stage 0 of the
  # staircase; None when the stages are whole-data estimates, whose stage 0 is initial_elbo).
  stage_elbo_start: Optional[np.ndarray] = None
  samples: Optional[dict[str, np.ndarray]] = None   # refine_non_gaussian(): block -> [M, *event]
  # refine(): ELBO_aux's terms, [M] each: sum_n E_q log p(y_n | x_n, w) under the refined
  # q_K(w | a_1..K), and KL(q_K || p(w | a_1..K)) plus the log ratios (elbo_aux = their difference).
  expected_log_likelihood: Optional[np.ndarray] = None
  kl_aux: Optional[np.ndarray] = None
  # refine() with a checkpoint directory: where it resumed from (None: from the start).
  resumed_from: Optional[str] = None

  @property
  def elbo_aux_estimate(self) -> float:
    """The Monte Carlo estimate of ELBO_aux: the mean over the M sample paths."""
    return float(np.mean(self.elbo_aux))

  @property
  def initial_elbo_estimate(self) -> float:
    return float(np.mean(self.initial_elbo))
