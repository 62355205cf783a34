"""Writes random CIFAR-10-format files (cifar-10-batches-bin) for smoke runs without CIFAR-10.

  python -m image.make_synthetic_cifar10 --output_dir=/tmp/synthetic/cifar10 \\
      [--examples_per_batch=200]
  python -m image.main --dataset=cifar10 --data_dir=/tmp/synthetic ...

The labels are learnable (the class sets an image's mean colour), so a smoke
run shows training working; the numbers mean nothing about CIFAR-10.
"""
from __future__ import annotations

from absl import flags

from common import images

from runner import cli


def main(argv):
  del argv
  cli.require(bool(flags.FLAGS.output_dir), "--output_dir is required")
  cli.require(flags.FLAGS.examples_per_batch >= 1,
              f"--examples_per_batch={flags.FLAGS.examples_per_batch} must be >= 1")
  folder = images.write_synthetic_cifar10(flags.FLAGS.output_dir, flags.FLAGS.examples_per_batch,
                                          flags.FLAGS.seed, flags.FLAGS.format)
  print(f"wrote {folder}")


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None,
                      "The cifar10 folder to write cifar-10-batches-<format>/ into.")
  flags.DEFINE_integer("examples_per_batch", 200, "Examples in each of the six batch files.")
  flags.DEFINE_integer("seed", 0, "Seed of the random images.")
  flags.DEFINE_enum("format", "bin", ["bin", "py"], "Binary records or pickled python batches.")
  cli.run(main)
