#!/usr/bin/env bash
# The LeNet-5 table (paper Table 2): common/run_table.sh over MNIST and Fashion-MNIST; same flags (see there).
#   image/run_table.sh [--output_root=results] [--seeds="0 1 2"] [--datasets="mnist fashion_mnist cifar10"]
#                      [--methods="..."] [--jobs=2] [--print_commands] [-- extra image.main flags]
exec "$(dirname "$0")/../common/run_table.sh" --benchmark=image --datasets="mnist fashion_mnist" "$@"
