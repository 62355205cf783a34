"""ResNet-20 image classification (paper Table 3): one dataset, variant, method and seed per run.

  python -m resnet.main --dataset=cifar10 --variational=hybrid --batchnorm --method=refined_vi \\
      --seed=0 --output_dir=results/resnet/cifar10/hybrid_bn/refined_vi/seed_0 \\
      --vi_checkpoint_dir=results/resnet/cifar10/hybrid_bn/vi_checkpoints/seed_0

Protocol (paper Section 4.3, the authors' code): per-channel standardisation,
no augmentation unless --data_augmentation, ResNet-20 v1 (resnet/networks.py; --depth)
with a Categorical likelihood, batch 256, Adam 1e-3 stepped down after epochs
80, 120, 160 and 180, 200 epochs, L2 1e-4 on the deterministic convolutions,
KL divided by N. Methods:
  vi                 mean-field VI of the hybrid or full variational ResNet;
                     M = 10 draws score it (--num_eval_samples=1: the authors');
  refined_vi         VI, then M = 10 refined samples (K = 10, ratio 0.5, 200
                     steps each); also writes the ELBO_aux trace and staircase;
  vi_equal_compute   VI trained further for M * K * T more steps;
  deep_ensemble      10 deterministic ResNet-20s (ReLU), the same schedule.
Metrics: test MLL, accuracy, Brier score, ECE; ELBO and ELBO_aux on the whole
training set; wall times and peak memory.
"""
from __future__ import annotations

from runner import cli
from resnet.config import ResNetConfig


@cli.runs_under_its_device_settings
def train_and_evaluate(config: ResNetConfig, output_dir: str) -> dict:
  """One run end to end; writes `output_dir/results.json` (and the staircase); returns metrics."""
  # TensorFlow loads here, after the flags have been checked.
  from runner.image_classification import train_and_evaluate_images
  from resnet.networks import resnet_networks
  return train_and_evaluate_images(config, resnet_networks, output_dir, "resnet",
                                   f"ResNet-{config.depth} {config.variational}"
                                   f"{' + batch norm' if config.batchnorm else ''}")


# The settings whose fields are this binary's flags (`runner.made` reads a command with them).
CONFIG_CLASS = ResNetConfig

if __name__ == "__main__":
  cli.main(CONFIG_CLASS, train_and_evaluate,
           printed_metrics=("test_mll", "test_accuracy", "elbo", "elbo_aux"))
