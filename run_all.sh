#!/usr/bin/env bash
# Makes every table and figure of the paper this suite reproduces, then the report
# (<output_root>/report/REPORT.md): Figure 2 (toy), Figure 3 (eight schools), Table 1 (UCI),
# Table 2 and Figure 4 (LeNet-5), Table 3 (ResNet-20), Figure 5 (mushroom bandit).
#   ./run_all.sh --scale=smoke [--with_related] [--output_root=/tmp/refined_vi_smoke] [--data_dir=DIR]
#       every binary and method family at tiny settings (minutes); --with_related adds VOGN, refined
#       VOGN, SVGD and f-SVGD (UCI) and the SVGD / f-SVGD bandit agents
#   ./run_all.sh --scale=paper [--output_root=results] [--data_dir=DIR]
#       the paper's settings (weeks on a CPU); into the committed results/ it is a no-op: every run
#       there was made by these commands, and a run already made with its settings is skipped
#   --data_dir=DIR   the datasets' folder (sets $REFINED_VI_DATA_DIR); without it and without the
#                    variable, files are downloaded into ~/.cache/refined_vi (checksummed)
#   --dry_run        runs nothing: prints per step its command, and for the runs that write a
#                    results.json which are already made with these settings (`runner.made`)
# Every step runs even if an earlier one failed; the script then exits 1 naming the failed steps.
set -uo pipefail
cd "$(dirname "$0")"
scale=smoke
output_root=""
dry_run=false
with_related=false
for argument in "$@"; do
  case "$argument" in
    --scale=*) scale="${argument#--scale=}" ;;
    --output_root=*) output_root="${argument#--output_root=}" ;;
    --data_dir=*) data_dir="${argument#--data_dir=}"
      [[ -d "$data_dir" ]] || { echo "error: --data_dir=$data_dir is not a folder" >&2; exit 2; }
      export REFINED_VI_DATA_DIR="$(cd "$data_dir" && pwd)" ;;
    --dry_run) dry_run=true ;;
    --with_related) with_related=true ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$argument'; allowed: --scale=smoke|paper, --output_root=DIR," \
            "--data_dir=DIR, --dry_run, --with_related" >&2; exit 2 ;;
  esac
done
case "$scale" in
  smoke) output_root="${output_root:-/tmp/refined_vi_smoke}" ;;
  paper) output_root="${output_root:-results}"
         if $with_related; then
           echo "error: --with_related is for --scale=smoke; the related methods' paper-scale" \
                "commands are in results/related/README.md" >&2; exit 2
         fi ;;
  *) echo "error: unknown scale '$scale'; allowed: smoke, paper" >&2; exit 2 ;;
esac
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
root="$output_root"

failed=()
step_number=0
# step NAME COMMAND...: runs COMMAND (a failure is noted and the next step runs anyway).
step() {
  local name="$1"; shift
  step_number=$((step_number + 1))
  echo "== [$step_number] $name: $(printf '%q ' "$@")"
  $dry_run && return
  local began=$SECONDS status
  "$@"; status=$?
  if [[ $status -eq 0 ]]; then
    echo "== [$step_number] $name: done in $((SECONDS - began)) s"
  else
    failed+=("[$step_number] $name (exit $status)")
    echo "== [$step_number] $name: FAILED (exit $status) after $((SECONDS - began)) s" >&2
  fi
}
# dry_run_check COMMAND...: what the dry run asks of a step (exit 3: "not made yet", no failure).
dry_run_check() {
  "$@"; local status=$?
  [[ $status -eq 0 || $status -eq 3 ]] || failed+=("[$step_number] dry run: $* (exit $status)")
}
# run NAME MODULE FLAGS...: one binary run; the dry run says whether it is already made.
run() {
  local name="$1" module="$2"; shift 2
  step "$name" python -m "$module" "$@"
  if $dry_run; then dry_run_check python -m runner.made "$module" "$@"; fi
}
# table NAME SCRIPT ARGUMENTS...: a run_table.sh; the dry run prints the commands of the runs not
# yet made and how many are made (common/run_table.sh --print_commands).
table() {
  local name="$1" script="$2"; shift 2
  step "$name" "$script" "$@"
  if $dry_run; then dry_run_check "$script" --print_commands "$@"; fi
}

echo "run_all.sh --scale=$scale: output under $root (report: $root/report/REPORT.md); data from" \
     "${REFINED_VI_DATA_DIR:-the download cache ~/.cache/refined_vi}$($dry_run && echo '; dry run: nothing runs')"
started=$SECONDS

if [[ "$scale" == smoke ]]; then
  toy_flags=(--num_samples=300 --vi_steps=500 --refine_steps=100 --elbo_samples=3000)
  eight_schools_flags=(--num_auxiliary=1,2,4 --num_samples=300 --initial_steps=500 --steps_per_auxiliary=100
                       --nuts_chains=16 --nuts_burnin=200 --nuts_draws=300)
else
  toy_flags=()
  eight_schools_flags=()
fi
run "Figure 2 (toy multimodal)" toy.multimodal --output_dir="$root/toy/multimodal" "${toy_flags[@]}"
run "Figure 3 (eight schools)" toy.eight_schools --output_dir="$root/toy/eight_schools" \
    "${eight_schools_flags[@]}"

if [[ "$scale" == smoke ]]; then
  uci_flags=(--vi_steps=300 --steps_per_auxiliary=20 --num_samples=3 --mnf_steps=100 --ensemble_steps=100
             --ensemble_members=3 --elbo_num_samples=1)
  lenet_flags=(--num_train_examples=1024 --num_test_examples=500 --vi_steps=100 --num_samples=3
               --num_auxiliary=2 --steps_per_auxiliary=10 --mnf_steps=50 --ensemble_members=2
               --ensemble_steps=50 --batch_size=64)
  resnet_flags=(--num_train_examples=256 --num_test_examples=100 --eval_batch_size=100 --batch_size=32
                --vi_steps=2 --num_samples=2 --num_auxiliary=2 --steps_per_auxiliary=1
                --ensemble_members=2 --ensemble_steps=2 --stage_elbo_aux_examples=64)
  bandit_flags=(--seeds=0,1 --horizon=20 --update_steps=5 --refine_steps=5 --regret_report_interval=10
                --steps_per_checkpoint=10 --nojit_compile)
  table "Table 1 (UCI, every method on yacht)" uci/run_table.sh --output_root="$root" --seeds=0 \
      --datasets=yacht_hydrodynamics --jobs=2 -- "${uci_flags[@]}"
  table "Table 2 and Figure 4 (LeNet-5, every method on 1,024 MNIST digits)" image/run_table.sh \
      --output_root="$root" --seeds=0 --datasets=mnist --jobs=2 -- "${lenet_flags[@]}"
  step "LeNet-5 on CIFAR-10: synthetic files in the real format" python -m image.make_synthetic_cifar10 \
      --output_dir="$root/synthetic_data/cifar10" --examples_per_batch=100
  # A step, not a run: its --data_dir is made by the step before, so a dry run cannot check it.
  step "LeNet-5 on the synthetic CIFAR-10 (refined VI)" python -m image.main --dataset=cifar10 \
      --method=refined_vi --data_dir="$root/synthetic_data" \
      --output_dir="$root/smoke/image/cifar10_synthetic/refined_vi" --vi_steps=100 --num_samples=3 \
      --num_auxiliary=2 --steps_per_auxiliary=10 --batch_size=64
  table "Table 3 (ResNet-20 hybrid_bn, every method on 256 Fashion-MNIST images)" resnet/run_table.sh \
      --output_root="$root" --datasets=fashion_mnist --seeds=0 --variants=hybrid_bn --jobs=2 -- \
      "${resnet_flags[@]}"
  run "Figure 5 (mushroom bandit: refined_ts, vi_ts, eps_greedy)" bandits.main \
      --output_dir="$root/bandits/mushroom" "${bandit_flags[@]}"
  if $with_related; then
    table "Related methods on UCI (VOGN, refined VOGN, SVGD, f-SVGD on yacht)" uci/run_table.sh \
        --output_root="$root/related" --seeds=0 --datasets=yacht_hydrodynamics --jobs=2 \
        --methods="vogn refined_vogn svgd fsvgd" -- "${uci_flags[@]}" --num_particles=4 --particle_epochs=2
    step "Related methods' UCI table" python -m report.uci_related_table --results_dir="$root/uci" \
        --related_dir="$root/related/uci" --output_dir="$root/related"
    run "Related bandit agents (svgd_ts, fsvgd_ts)" bandits.main --agents=svgd_ts,fsvgd_ts \
        --num_particles=4 --output_dir="$root/related/bandits/mushroom_particles" "${bandit_flags[@]}"
  fi
  report_flags=(--smoke)
else
  # Table 1: 9 datasets x 5 methods x seeds 0-4. MNF and the ensemble keep the per-step draws they
  # were made with (--noise_chunk_steps=0: drawing ahead changes their numbers; uci/README.md).
  table "Table 1 (UCI: VI, refined VI, VI with equal compute)" uci/run_table.sh --output_root="$root" \
      --jobs=2 --methods="vi refined_vi vi_equal_compute"
  table "Table 1 (UCI: MNF, deep ensemble; per-step draws)" uci/run_table.sh --output_root="$root" \
      --jobs=2 --methods="mnf deep_ensemble" -- --nojit_compile --noise_chunk_steps=0
  # Table 2 and Figure 4: MNIST and Fashion-MNIST, every method, seeds 0-2.
  table "Table 2 and Figure 4 (LeNet-5)" image/run_table.sh --output_root="$root" --seeds="0 1 2" \
      --jobs=2 -- --steps_per_checkpoint=1000
  # Table 3: CIFAR-10 when its files are here, else the Fashion-MNIST evidence (resnet/README.md).
  if python -c 'import sys; from common import images; sys.exit(not images.local_cifar10_folder())'; then
    echo "Table 3: CIFAR-10 found: the paper's table, 4 variants x 4 methods x seeds 0-2 (~640 CPU hours)"
    table "Table 3 (ResNet-20 on CIFAR-10)" resnet/run_table.sh --output_root="$root"
  else
    echo "Table 3: no CIFAR-10 files (\$REFINED_VI_DATA_DIR/cifar10 or the cache): the Fashion-MNIST" \
         "evidence instead, all 60,000 images, 10 epochs, seeds 0-1 (resnet/README.md)"
    fashion=(--output_root="$root/resnet_fashion_mnist_60k" --datasets=fashion_mnist --jobs=1)
    t3_flags=(--epochs=10 --decay_epochs=4,6,8,9 --num_auxiliary=10 --steps_per_auxiliary=10 --num_samples=10
              --variance_ratio=0.5 --initial_untransformed_posterior_scale=-2 --ensemble_members=5
              --intra_op_threads=1 --steps_per_checkpoint=100)
    table "Table 3 (ResNet-20 on Fashion-MNIST: VI, VI with equal compute)" resnet/run_table.sh \
        "${fashion[@]}" --seeds="0 1" --variants="hybrid_bn full_bn" --methods="vi vi_equal_compute" -- \
        "${t3_flags[@]}"
    # Refined VI is its own table only because its --stage_elbo_aux_examples would change the VI
    # runs' records; it starts from their VI checkpoints, so it runs after them, never beside them.
    table "Table 3 (ResNet-20 on Fashion-MNIST: refined VI)" resnet/run_table.sh "${fashion[@]}" \
        --seeds="0 1" --variants="hybrid_bn full_bn" --methods=refined_vi -- "${t3_flags[@]}" \
        --stage_elbo_aux_examples=5000
    table "Table 3 (ResNet-20 on Fashion-MNIST: deep ensemble, hybrid_bn seed 0)" resnet/run_table.sh \
        "${fashion[@]}" --seeds=0 --variants=hybrid_bn --methods=deep_ensemble -- "${t3_flags[@]}"
  fi
  # Figure 5: 5 seeds, 5,000 steps; vi_ts in one run, refined_ts and eps_greedy seed by seed (~11 h).
  bandit="$root/bandits/mushroom"
  run "Figure 5 (mushroom bandit: vi_ts, seeds 0-4)" bandits.main --agents=vi_ts --output_dir="$bandit/vi_ts"
  bandit_runs="$bandit/vi_ts"
  for agent in refined_ts eps_greedy; do
    for seed in 0 1 2 3 4; do
      run "Figure 5 (mushroom bandit: $agent, seed $seed)" bandits.main --agents=$agent --seeds=$seed \
          --output_dir="$bandit/$agent/seed_$seed"
      bandit_runs+=",$bandit/$agent/seed_$seed"
    done
  done
  step "Figure 5 (the figure from its runs)" python -m bandits.figure --run_dirs="$bandit_runs" \
      --output_dir="$bandit"
  step "Figure 5 (where the regret comes from)" python -m report.bandit_regret_sources \
      --run_dirs="$bandit_runs" --output_dir="$bandit"
  report_flags=()
fi
step "Table 1 (UCI table and checks)" python -m report.uci_table --results_dir="$root/uci" \
    --output_dir="$root/uci" "${report_flags[@]}"
# Smoke only: results/benchmarks/uci_timings/ keeps its measurements of the table's first runs
# (uci/README.md, Speed), which were since replaced.
if [[ "$scale" == smoke ]]; then
  step "UCI timings" python -m benchmarks.uci_timings --results_dir="$root/uci" \
      --output_dir="$root/benchmarks/uci_timings"
fi
step "Table 2 (LeNet-5 table and checks)" python -m report.image_table --results_dir="$root/image" \
    --output_dir="$root/image" "${report_flags[@]}"
step "Table 3 (ResNet-20 table and checks)" python -m report.resnet_table --results_dir="$root/resnet" \
    --output_dir="$root/resnet" "${report_flags[@]}"
step "The report (Figures 2-5, Tables 1-3)" python -m report.main --results_dir="$root" \
    --output_dir="$root/report" --format=latex "${report_flags[@]}"

if $dry_run; then
  echo "run_all.sh --scale=$scale --dry_run: $step_number steps listed, nothing run"
else
  echo "run_all.sh --scale=$scale: $step_number steps in $((SECONDS - started)) s; output under $root," \
       "report $root/report/REPORT.md"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "${#failed[@]} of $step_number steps failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
