#!/usr/bin/env bash
# Table 3's evidence on all 60,000 Fashion-MNIST images, seed 0 (the command of
# results/resnet_fashion_mnist_60k/README.md, one stage per run). Each stage resumes from its
# checkpoints (VI's, then refinement's); a finished run is skipped; a failed one stops the chain.
set -u
source "$(dirname "$0")/common.sh"
export REFINED_VI_DATA_DIR=${REFINED_VI_DATA_DIR:-/work/shared/data} TF_ENABLE_ONEDNN_OPTS=1
root=$RUNS/t3_main/out
mkdir -p "$root"
worktree "$RUNS/wt_t3" 879984b
cd "$RUNS/wt_t3"
stage() {  # stage <variant> <method> <seed>
  local variant=$1 method=$2 seed=$3 extra=()
  if [[ -f "$root/resnet/fashion_mnist/$variant/$method/seed_$seed/results.json" ]]; then
    return
  fi
  [[ $method == refined_vi ]] && extra=(--stage_elbo_aux --stage_elbo_aux_examples=5000)
  echo "$(date -u) start $variant $method $seed" >> "$RUNS/t3_main/status.txt"
  resnet/run_table.sh --output_root="$root" --datasets=fashion_mnist --seeds="$seed" \
    --variants="$variant" --methods="$method" --jobs=1 -- --epochs=10 --decay_epochs=4,6,8,9 \
    --num_auxiliary=10 --steps_per_auxiliary=10 --num_samples=10 --variance_ratio=0.5 \
    --initial_untransformed_posterior_scale=-2 --ensemble_members=5 --intra_op_threads=1 \
    --steps_per_checkpoint=100 "${extra[@]}"
  local rc=$?
  echo "$(date -u) end $variant $method $seed exit $rc" >> "$RUNS/t3_main/status.txt"
  [[ $rc == 0 ]] || exit 1
}
stage hybrid_bn refined_vi 0
stage hybrid_bn vi_equal_compute 0
stage full_bn refined_vi 0
stage full_bn vi_equal_compute 0
# A second seed of hybrid_bn (the seed's noise in the paired gain) before the ensemble; its vi
# run evaluates the VI checkpoint its refined_vi run trained.
stage hybrid_bn refined_vi 1
stage hybrid_bn vi 1
stage hybrid_bn vi_equal_compute 1
stage hybrid_bn deep_ensemble 0
