"""UCI regression benchmark (paper Table 1): one dataset, one method, one seed per run.

  python -m uci.main --dataset=boston_housing --method=refined_vi --seed=0 \\
      --output_dir=results/uci/boston_housing/refined_vi/seed_0

Protocol (paper Section 4.2): a random 80/20 split from the seed (or
`--split=standard_90_10`), inputs and targets standardised with training
statistics, one hidden layer of 50 ReLU units, a Gaussian likelihood whose
noise scale is one learned point estimate, test MLL and RMSE in the original
units of y. Methods:
  vi                 mean-field VI (30,000 steps), M draws for the predictive;
  refined_vi         VI, then M refined samples (Algorithm 1, K = 5, ratio 0.7);
  vi_equal_compute   VI trained further for M * K * T more steps, the Adam
                     steps refinement spends (the fair-compute baseline);
  mnf                multiplicative normalizing flows, 30,000 steps;
  deep_ensemble      10 heteroscedastic members, 5,000 adversarial steps each;
  vogn               the mean-field network fitted by VOGN (methods.trainers.vogn; not in the
                     paper), a fixed N(0, 1) prior (or --vogn_prior=empirical_bayes),
                     --vi_steps steps;
  refined_vogn       VOGN, then M refined samples as refined_vi;
  svgd, fsvgd        20 particles by weight-space or function-space SVGD
                     (methods.trainers.particles;
                     not in the paper), the f-POVI paper's settings (Adam 0.004, batch 100 for
                     500 epochs, or 1000 for 3000 on training sets of more than 900).
VI training checkpoints into `--vi_checkpoint_dir` (default under the output
directory); the vi, refined_vi and vi_equal_compute runs of one dataset and
seed may share it, so the mean-field model is trained once. Reruns resume
checkpoints made with the same settings and refuse others.
"""
from __future__ import annotations

import time

from runner import cli
from uci.config import UciConfig


@cli.runs_under_its_device_settings
def train_and_evaluate(config: UciConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` and returns its metrics.

  Metrics are in the original units of y; `target_std` (the training targets'
  std) is recorded so that tables can convert the standardised ELBOs.
  """
  # TensorFlow loads here, after the flags have been checked.
  import numpy as np
  from runner.dispatch import train_method, write_method_results
  from common.seeding import seed_everything
  from uci import data
  from uci.networks import uci_networks
  from methods.trainers.gaussian_head import HomoscedasticNoise, gaussian_head_log_likelihood
  from uci.regression import regression_metrics

  config.validate()
  started = time.perf_counter()
  seed_everything(config.seed)
  features, targets = data.load(config.dataset, config.resolved_data_dir, config.download)
  num_splits = data.num_standard_splits(config.dataset, config.resolved_data_dir, config.download)
  split = data.prepare(features, targets, config.split, config.seed, num_splits,
                       config.input_scaling)
  run = train_method(config, uci_networks(config), split.x_train, split.y_train,
                     gaussian_head_log_likelihood, output_dir)
  metrics = dict(run.metrics)
  metrics.update(regression_metrics(run.sample_outputs(split.x_test), split.y_test_original,
                                    split.target_mean, split.target_std))
  noise_scales = [layer.noise_scale.numpy() for model in run.models for layer in model.layers
                  if isinstance(layer, HomoscedasticNoise)]
  if noise_scales:   # after any extra training; the ensemble predicts its scale per input
    metrics["noise_scale"] = float(np.mean(noise_scales)) * split.target_std
  metrics.update(num_train=len(split.y_train), num_test=len(split.y_test),
                 target_std=float(split.target_std))
  timings = dict(run.timings, total_seconds=time.perf_counter() - started)
  write_method_results(output_dir, "uci", config, metrics, timings)
  return metrics


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = UciConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate,
           printed_metrics=("test_mll", "test_rmse", "elbo", "elbo_aux"))
