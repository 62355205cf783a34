#!/usr/bin/env bash
# Starts the runs in progress in the background, first unpacking the checkpoints kept here into
# $RUNS when a run's output is missing there (a new machine).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
mkdir -p "$RUNS"
for name in fig5 t3_main; do
  if [[ ! -d "$RUNS/$name" && -f "$here/checkpoints_$name.tar.gz" ]]; then
    tar -xzf "$here/checkpoints_$name.tar.gz" -C "$RUNS"
    echo "unpacked $here/checkpoints_$name.tar.gz into $RUNS/$name"
  fi
done
mkdir -p "$RUNS/fig5" "$RUNS/t3_main"
nohup setsid "$here/figure5_noise_0.5.sh" >> "$RUNS/fig5/runner.out" 2>&1 &
nohup setsid "$here/table3_fashion_mnist_60k.sh" >> "$RUNS/t3_main/chain.out" 2>&1 &
echo "started; logs: $RUNS/fig5/log_<agent>.txt, $RUNS/t3_main/status.txt and each run's log.txt"
