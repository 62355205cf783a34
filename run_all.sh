#!/usr/bin/env bash
# Regenerates every table and figure this suite has so far (toy Figure 2, UCI Table 1), then the report.
#   ./run_all.sh --scale=smoke [--output_root=DIR]   minutes, no data needed
#   ./run_all.sh --scale=paper [--output_root=DIR]   the paper's settings
set -euo pipefail
cd "$(dirname "$0")"
scale=smoke
output_root=""
for argument in "$@"; do
  case "$argument" in
    --scale=*) scale="${argument#--scale=}" ;;
    --output_root=*) output_root="${argument#--output_root=}" ;;
    *) echo "error: unknown argument '$argument'; allowed: --scale=smoke|paper, --output_root=DIR" >&2; exit 2 ;;
  esac
done
case "$scale" in
  smoke) output_root="${output_root:-/tmp/refined_vi_smoke}"
         toy_flags=(--num_samples=300 --vi_steps=500 --refine_steps=100 --elbo_samples=3000) ;;
  paper) output_root="${output_root:-results}"
         toy_flags=() ;;
  *) echo "error: unknown scale '$scale'; allowed: smoke, paper" >&2; exit 2 ;;
esac
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

python -m toy.multimodal --output_dir="$output_root/toy/multimodal" "${toy_flags[@]}"

# UCI regression (Table 1): smoke = every method on yacht for a few steps; paper = 9 datasets x 5 methods x 5 seeds.
if [[ "$scale" == smoke ]]; then
  uci/run_table.sh --output_root="$output_root" --seeds=0 --datasets=yacht_hydrodynamics -- \
      --vi_steps=300 --steps_per_auxiliary=20 --num_samples=3 --mnf_steps=100 --ensemble_steps=100 \
      --ensemble_members=3 --elbo_num_samples=1
else
  uci/run_table.sh --output_root="$output_root" --jobs=2
fi
python -m uci.table --results_dir="$output_root/uci" --output_dir="$output_root/uci"
python -m benchmarks.uci_timings --results_dir="$output_root/uci" --output_dir="$output_root/benchmarks/uci_timings"
python -m common.report --results_dir="$output_root" --output_dir="$output_root/report"
