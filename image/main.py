"""LeNet-5 image classification (paper Table 2, Figure 4): one dataset, method and seed per run.

  python -m image.main --dataset=mnist --method=refined_vi --seed=0 \\
      --output_dir=results/image/mnist/refined_vi/seed_0 \\
      --vi_checkpoint_dir=results/image/mnist/vi_checkpoints/seed_0

Protocol (paper Sections 4.1 and 4.3): the standard train/test split,
per-channel standardisation with training statistics (the ensemble: [0, 1]
pixels), no augmentation, LeNet-5 with a Categorical likelihood, batch 256,
Adam 1e-3. Methods:
  vi                 mean-field VI (Flipout convolutions, local reparameterisation
                     dense layers), 30,000 steps; M = 10 draws for the predictive;
  refined_vi         VI, then M = 10 refined samples (K = 5, ratio 0.7, 200 steps
                     each); also writes the ELBO_aux trace and Figure 4;
  vi_equal_compute   VI trained further for M * K * T more steps;
  mnf                MNF LeNet-5, 30,000 steps;
  deep_ensemble      10 deterministic LeNet-5s, 5,000 steps each, no adversarial training,
                     Glorot-uniform kernels and [0, 1] pixels as in uncertainty-baselines'
                     deterministic LeNet-5, the source of the paper's ensemble numbers;
  vogn               the same mean-field LeNet-5 fitted by VOGN (methods.trainers.vogn; not in
                     the paper), a fixed N(0, 1) prior (or --vogn_prior=empirical_bayes),
                     --vi_steps steps;
  refined_vogn       VOGN, then M = 10 refined samples as refined_vi.
Metrics: test MLL, accuracy, Brier score, ECE; ELBO and ELBO_aux on the whole
training set; wall times and peak memory.
"""
from __future__ import annotations

from runner import cli
from image.config import ImageConfig


@cli.runs_under_its_device_settings
def train_and_evaluate(config: ImageConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` (and Figure 4) and returns its metrics."""
  # TensorFlow loads here, after the flags have been checked.
  from runner.image_classification import train_and_evaluate_images
  from image.lenet import lenet5_networks
  return train_and_evaluate_images(config, lenet5_networks, output_dir, "image", "LeNet-5")


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = ImageConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate,
           printed_metrics=("test_mll", "test_accuracy", "elbo", "elbo_aux"))
