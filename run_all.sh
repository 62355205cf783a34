#!/usr/bin/env bash
# Regenerates every table and figure this suite has so far (toy Figure 2, eight schools Figure 3, UCI
# Table 1, LeNet-5 Table 2 and Figure 4), then the report ($output_root/report/REPORT.md). Data: $REFINED_VI_DATA_DIR (or downloads, checksummed).
#   ./run_all.sh --scale=smoke [--output_root=DIR]   minutes: every binary and method at tiny settings
#   ./run_all.sh --scale=paper [--output_root=DIR]   the paper's settings (LeNet-5: days on 2 CPU cores)
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
         toy_flags=(--num_samples=300 --vi_steps=500 --refine_steps=100 --elbo_samples=3000)
         eight_schools_flags=(--num_auxiliary=1,2,4 --num_samples=300 --initial_steps=500 --steps_per_auxiliary=100
                              --nuts_chains=16 --nuts_burnin=200 --nuts_draws=300) ;;
  paper) output_root="${output_root:-results}"
         toy_flags=()
         eight_schools_flags=() ;;
  *) echo "error: unknown scale '$scale'; allowed: smoke, paper" >&2; exit 2 ;;
esac
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

python -m toy.multimodal --output_dir="$output_root/toy/multimodal" "${toy_flags[@]}"
python -m toy.eight_schools --output_dir="$output_root/toy/eight_schools" "${eight_schools_flags[@]}"

# UCI regression (Table 1): smoke = every method on yacht for a few steps; paper = 9 datasets x 5 methods x 5 seeds.
if [[ "$scale" == smoke ]]; then
  uci/run_table.sh --output_root="$output_root" --seeds=0 --datasets=yacht_hydrodynamics -- \
      --vi_steps=300 --steps_per_auxiliary=20 --num_samples=3 --mnf_steps=100 --ensemble_steps=100 \
      --ensemble_members=3 --elbo_num_samples=1
else
  uci/run_table.sh --output_root="$output_root" --jobs=2
fi
python -m report.uci_table --results_dir="$output_root/uci" --output_dir="$output_root/uci"
python -m benchmarks.uci_timings --results_dir="$output_root/uci" --output_dir="$output_root/benchmarks/uci_timings"
# LeNet-5 (Table 2, Figure 4): smoke = every method on 1,024 MNIST digits and a CIFAR-10 run on synthetic
# files in the real format; paper = MNIST and Fashion-MNIST, every method, seeds 0-2 (CIFAR-10 needs the data:
# image/run_table.sh --datasets=cifar10 --seeds="0 1 2" --jobs=2).
if [[ "$scale" == smoke ]]; then
  image/run_table.sh --output_root="$output_root" --seeds=0 --datasets=mnist -- \
      --num_train_examples=1024 --num_test_examples=500 --vi_steps=100 --num_samples=3 --num_auxiliary=2 \
      --steps_per_auxiliary=10 --mnf_steps=50 --ensemble_members=2 --ensemble_steps=50 --batch_size=64
  python -m image.make_synthetic_cifar10 --output_dir="$output_root/synthetic_data/cifar10" --examples_per_batch=100
  python -m image.main --dataset=cifar10 --method=refined_vi --data_dir="$output_root/synthetic_data" \
      --output_dir="$output_root/smoke/image/cifar10_synthetic/refined_vi" --vi_steps=100 --num_samples=3 \
      --num_auxiliary=2 --steps_per_auxiliary=10 --batch_size=64
else
  image/run_table.sh --output_root="$output_root" --seeds="0 1 2" --jobs=2 -- --steps_per_checkpoint=1000
  python -m benchmarks.image_speed --output_dir="$output_root/benchmarks/image_speed"
fi
python -m report.image_table --results_dir="$output_root/image" --output_dir="$output_root/image"
python -m report.main --results_dir="$output_root" --output_dir="$output_root/report" --format=latex
