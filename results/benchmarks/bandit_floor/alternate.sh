#!/bin/bash
# benchmarks.bandit_speed with the library at 7ac5a7a (BEFORE: that commit's tree, with this
# commit's benchmarks/ copied in) and at this commit (AFTER), in alternating rounds.
# Usage: BEFORE=/tmp/before AFTER=/work/wt_speed OUT=<dir> ROUNDS=2 bash alternate.sh
set -euo pipefail
for round in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    tree=$([ "$side" = before ] && echo "$BEFORE" || echo "$AFTER")
    (cd "$tree" && python -m benchmarks.bandit_speed --agents=vi_ts,refined_ts \
        --loops=per_step,compiled --update_steps=100 --refine_steps=100 --history=5 --steps=2 \
        --rounds=1 --output_dir="$OUT/${side}_round_$round")
  done
done
