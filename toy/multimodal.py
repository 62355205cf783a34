r"""Multi-modal toy example (paper Section 2.3, Figure 2).

One weight w with prior N(0, 1) and a rippled likelihood
  log p(D | w) = -w^2 / (2 * envelope_variance) - ripple * cos(2 pi w / period),
which with the defaults makes the posterior four-moded (modes near +-0.45 and
+-1.3, checked numerically and reported). As in the paper's Figure 2 the best
Gaussian is broad and misses the modes. VI starts from the prior. A
Gaussian VI fit is compared with refinement using w = a_1 + a_2,
p(a_1) = N(0, 0.8), p(a_2) = N(0, 0.2): sample a_1 ~ q_0(a_1), fit q_1(w) to
p(w | D, a_1), draw w ~ q_1(w).

  python -m toy.multimodal --output_dir=results/toy/multimodal
"""
from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np

from runner import cli
from common.config import Config, setting
from common.results import save_figure, write_results
from common.seeding import seed_everything

# Draws of w whose basins hold fewer than this fraction of the samples do not
# count as visiting a mode.
MODE_VISIT_FRACTION = 0.01


@dataclasses.dataclass
class ToyConfig(Config):
  """The toy's likelihood, the auxiliary split and the optimisation."""

  seed: int = setting(0, "Random seed.", minimum=0)
  num_samples: int = setting(2000, "Refined samples M (one weight each).", minimum=1)
  ripple: float = setting(1.0, "Depth of the likelihood's ripples (nats).", above=0)
  period: float = setting(1.0, "Distance between neighbouring modes.", above=0)
  envelope_variance: float = setting(0.5, "Variance of the likelihood's Gaussian envelope.",
                                     above=0)
  first_variance: float = setting(0.8, "Prior variance of a_1 (a_2 gets 1 - this).", above=0,
                                  below=1)
  vi_steps: int = setting(3000, "Adam steps of the Gaussian VI fit.", minimum=1)
  refine_steps: int = setting(500, "Adam steps after sampling a_1.", minimum=1)
  learning_rate: float = setting(1e-2, "Adam learning rate (VI and refinement).", above=0)
  batch_size: int = setting(256, "Monte Carlo draws of w per Adam step.", minimum=1)
  elbo_samples: int = setting(20000, "Monte Carlo draws for each ELBO estimate.", minimum=1)


def log_likelihood(weight, config: ToyConfig):
  """log p(D | w), elementwise (works on numpy arrays and tensors)."""
  return (-0.5 * weight**2 / config.envelope_variance
          - config.ripple * _cos(2 * np.pi * weight / config.period))


def _cos(value):
  # A tensor exists only once TensorFlow has loaded: the module does not load it for numpy input.
  tf = sys.modules.get("tensorflow")
  return tf.cos(value) if tf is not None and isinstance(value, tf.Tensor) else np.cos(value)


def true_posterior(config: ToyConfig, grid: np.ndarray) -> tuple[np.ndarray, float]:
  """The normalised posterior density on `grid` and the log evidence, by quadrature."""
  log_joint = log_likelihood(grid, config) - 0.5 * grid**2 - 0.5 * np.log(2 * np.pi)
  peak = log_joint.max()
  evidence = np.trapz(np.exp(log_joint - peak), grid)
  return np.exp(log_joint - peak) / evidence, float(np.log(evidence) + peak)


def mode_basins(grid: np.ndarray, density: np.ndarray) -> list[tuple[float, float, float]]:
  """(mode, left edge, right edge) for each local maximum of the density on the grid."""
  interior = np.arange(1, len(grid) - 1)
  maxima = interior[(density[interior] > density[interior - 1]) &
                    (density[interior] >= density[interior + 1])]
  minima = interior[(density[interior] < density[interior - 1]) &
                    (density[interior] <= density[interior + 1])]
  basins = []
  for peak in maxima:
    left = minima[minima < peak]
    right = minima[minima > peak]
    basins.append((float(grid[peak]), float(grid[left[-1]]) if len(left) else -np.inf,
                   float(grid[right[0]]) if len(right) else np.inf))
  return basins


def _model(num_members=None):
  import tf_keras
  from auxiliary_sampling.layers import GaussianSample
  from auxiliary_sampling.parameters import inverse_softplus
  # Untransformed scale softplus^-1(1): VI starts from the prior N(0, 1).
  return tf_keras.Sequential([GaussianSample([1], num_members=num_members, prior_scale=1.0,
                                             trainable_prior_scale=False,
                                             untransformed_scale_init=inverse_softplus(1.0))])


def train_and_evaluate(config: ToyConfig, output_dir: str | None = None) -> dict:
  """Runs the Gaussian fit and the refinement and returns the metrics.

  With `output_dir`, also writes results.json and figure.png there.
  """
  config.validate()
  # TensorFlow loads here, after the flags have been checked.
  from auxiliary_sampling.elbo_estimate import estimate_elbo
  from auxiliary_sampling.refine import refine
  from auxiliary_sampling.schedule import AuxiliarySchedule
  from methods.trainers.vi import train_mean_field
  seed_everything(config.seed)
  started = time.perf_counter()
  # The whole likelihood is one "example"; each batch row draws its own w.
  inputs, labels = np.zeros([1, 1], np.float32), np.zeros([1], np.float32)

  def log_lik(_, weights):
    return log_likelihood(weights[..., 0], config)

  gaussian = _model()
  training = train_mean_field(gaussian, inputs, labels, log_lik, num_steps=config.vi_steps,
                              learning_rate=config.learning_rate, batch_size=config.batch_size,
                              seed=config.seed)
  elbo = float(
      estimate_elbo(gaussian, inputs, labels, log_lik, batch_size=1,
                    num_samples=config.elbo_samples))
  result = refine(_model, gaussian, inputs, labels, log_lik, num_samples=config.num_samples,
                  schedule=AuxiliarySchedule.explicit([config.first_variance]),
                  steps_per_auxiliary=config.refine_steps, learning_rates=[config.learning_rate],
                  batch_size=config.batch_size, seed=config.seed,
                  elbo_num_samples=max(1, config.elbo_samples // config.num_samples))
  weight = result.model.layers[0].weight
  rng = np.random.default_rng(config.seed)
  refined_loc = weight.posterior_loc.numpy()[:, 0]
  refined_scale = weight.posterior_scale.numpy()[:, 0]
  samples = refined_loc + refined_scale * rng.normal(size=refined_loc.shape)

  grid = np.linspace(-3.0, 3.0, 6001)
  density, log_evidence = true_posterior(config, grid)
  basins = mode_basins(grid, density)
  visited = [
      np.mean((samples > left) & (samples < right)) >= MODE_VISIT_FRACTION
      for _, left, right in basins
  ]
  gaussian_weight = gaussian.layers[0].weight
  metrics = {
      "elbo": elbo,
      "elbo_aux": result.elbo_aux_estimate,
      "elbo_aux_stderr": float(result.elbo_aux.std() / np.sqrt(len(result.elbo_aux))),
      "log_evidence": log_evidence,
      "modes_visited": float(np.mean(visited)),
      "num_modes": len(basins),
      "mode_locations": [round(mode, 4) for mode, _, _ in basins],
      "refined_mass_per_mode": [
          float(np.mean((samples > lower) & (samples < upper))) for _, lower, upper in basins
      ],
      "true_mass_per_mode": [
          float(np.trapz(density * ((grid > lower) & (grid < upper)), grid))
          for _, lower, upper in basins
      ],
      "gaussian_loc": float(gaussian_weight.posterior_loc.numpy()[0]),
      "gaussian_scale": float(gaussian_weight.posterior_scale.numpy()[0]),
  }
  timings = {
      "train_seconds": training.train_seconds,
      "refine_seconds": result.timings["refine_seconds"],
      "total_seconds": time.perf_counter() - started
  }
  plot_data = dict(grid=grid, density=density, samples=samples, refined_loc=refined_loc,
                   refined_scale=refined_scale,
                   gaussian=(metrics["gaussian_loc"], metrics["gaussian_scale"]))
  if output_dir is not None:
    save_figure(_figure(plot_data, metrics), f"{output_dir}/figure.png")
    write_results(output_dir, benchmark="toy", dataset="multimodal", method="refined_vi",
                  seed=config.seed, flags=config.as_dict(), metrics=metrics, timings=timings)
  return metrics


def _normal_pdf(x, loc, scale):
  return np.exp(-0.5 * ((x - loc) / scale) ** 2) / (scale * np.sqrt(2 * np.pi))


def _figure(data, metrics):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  grid, density = data["grid"], data["density"]
  figure, axes = plt.subplots(1, 4, figsize=(16, 3.2), sharex=True)
  axes[0].plot(grid, density, "k")
  axes[0].set_title("(a) true posterior")
  axes[1].plot(grid, density, "k", alpha=0.4)
  axes[1].plot(grid, _normal_pdf(grid, *data["gaussian"]), "C0")
  axes[1].set_title(f"(b) Gaussian fit, ELBO = {metrics['elbo']:.2f}")
  axes[2].plot(grid, density, "k", alpha=0.4)
  for m in range(min(6, len(data["refined_loc"]))):
    axes[2].plot(grid,
                 _normal_pdf(grid, data["refined_loc"][m], data["refined_scale"][m]) * 0.1,
                 f"C{m + 1}")
  axes[2].set_title("(c) q_1(w) for six draws of a_1 (scaled)")
  axes[3].hist(data["samples"], bins=120, range=(-2, 2), density=True, color="C1", alpha=0.7)
  axes[3].plot(grid, density, "k")
  axes[3].set_title(f"(d) refined samples, ELBO_aux = {metrics['elbo_aux']:.2f}")
  for axis in axes:
    axis.set_xlim(-2, 2)
    axis.set_xlabel("w")
  figure.tight_layout()
  return figure


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = ToyConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate, printed_metrics=("elbo", "elbo_aux", "modes_visited"))
