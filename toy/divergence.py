"""Sample-based KL divergence estimates.

KL(P || Q) from samples of both, by the k-nearest-neighbour estimator of
Wang, Kulkarni & Verdú (2009):

  KL ~ d/n sum_i log(nu_k(i) / rho_k(i)) + log(m / (n - 1)),

with rho_k(i) the distance from x_i to its k-th neighbour among the other P
samples and nu_k(i) to its k-th neighbour among the m Q samples. It is
consistent without a bandwidth, which in more than a few dimensions makes it
far less biased than plugging kernel density estimates into the KL integral.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree


def knn_kl_divergence(p_samples: np.ndarray, q_samples: np.ndarray, k: int = 5) -> float:
  """KL(P || Q) estimated from [n, d] samples of P and [m, d] samples of Q."""
  p_samples, q_samples = np.asarray(p_samples, np.float64), np.asarray(q_samples, np.float64)
  if p_samples.ndim != 2 or q_samples.ndim != 2 or p_samples.shape[1] != q_samples.shape[1]:
    raise ValueError(
        f"samples must be [n, d] and [m, d], got {p_samples.shape} and {q_samples.shape}")
  n, dimension = p_samples.shape
  m = len(q_samples)
  if not 1 <= k < min(n, m + 1):
    raise ValueError(f"k={k} must be in [1, {min(n - 1, m)}] for {n} and {m} samples")
  rho = cKDTree(p_samples).query(p_samples, k + 1)[0][:,
                                                      k]  # the first neighbour is the point itself
  nu = cKDTree(q_samples).query(p_samples, k)[0]
  nu = nu[:, k - 1] if k > 1 else nu
  if np.any(rho == 0):
    raise ValueError(
        "P has repeated samples (zero nearest-neighbour distance); "
        "the estimator needs distinct points"
    )
  return float(dimension * np.mean(np.log(nu / rho)) + np.log(m / (n - 1)))
