#!/usr/bin/env bash
# Figure 5 at paper scale with the reward-noise scale fixed at 0.5: refined_ts, then eps_greedy
# (vi_ts landed in results/bandits/mushroom_noise_0.5). Resumes from its checkpoints; a finished
# agent is skipped; any failure stops the script with exit 1.
set -u
source "$(dirname "$0")/common.sh"
export REFINED_VI_DATA_DIR=${REFINED_VI_DATA_DIR:-/work/shared/data}
out=$RUNS/fig5/noise_0.5
mkdir -p "$out"
worktree "$RUNS/wt_bandit" a452500
cd "$RUNS/wt_bandit"
for agent in refined_ts eps_greedy; do
  if [[ -f "$out/$agent/results.json" ]]; then echo "$agent done"; continue; fi
  echo "$(date -u) start $agent"
  python -m bandits.main --agents=$agent --noise_scale=0.5 --intra_op_threads=1 \
    --steps_per_checkpoint=50 --output_dir="$out/$agent" >> "$RUNS/fig5/log_$agent.txt" 2>&1
  rc=$?
  echo "$(date -u) $agent exit $rc"
  [[ $rc == 0 ]] || exit 1
done
