#!/usr/bin/env bash
# Runs a benchmark's table: datasets x methods x seeds. A run whose output directory already holds
# results.json with the same settings is skipped (the binary checks); one with other settings stops
# with the differing flag (pass --replace_mismatched after -- to rerun it). Any failed run makes this
# script exit 1 after the others have finished, with a list of what failed.
#   common/run_table.sh --benchmark=uci|image|resnet --datasets="..." [--output_root=results]
#                       [--seeds="0 1 2 3 4"] [--methods="..."] [--jobs=2] [--vi_checkpoint_root=ROOT]
#                       [--variant=NAME] [--print_commands] [-- extra <benchmark>.main flags]
# (uci/, image/ and resnet/run_table.sh call it with their datasets; --variant puts the runs under
# <root>/<benchmark>/<dataset>/<variant>/, as ResNet-20's four architectures are.) Per dataset and seed, vi,
# refined_vi and vi_equal_compute run one after another in one job and share one VI checkpoint
# (<root>/<benchmark>/<dataset>/vi_checkpoints/seed_<s>), so the mean-field model is trained once;
# vogn and refined_vogn likewise share its vogn/ subfolder; the other methods are separate jobs
# (`python -m methods.registry --jobs="..."` says which methods share a job).
# With --jobs=N, N jobs run at once, one thread each.
# --vi_checkpoint_root reads (and writes) the VI checkpoints under ROOT instead of --output_root: a variant
# of refinement (extra flags) then starts from the very VI models of an existing table.
# --print_commands runs nothing: it prints one self-contained shell command per job with a run not yet
# made with these settings (as the binaries decide it, from the flags results.json records;
# `python -m runner.made`), and on stderr ("#" lines) how many runs are made and to run. A job's
# methods run in order inside its one command, so the lines need no ordering: hand them to any
# scheduler, e.g. `... --print_commands | xargs -P 8 -d '\n' -n 1 bash -c`, GNU parallel, or a Slurm
# array (docs/scaling.md). With --jobs above 1 each command is pinned to one thread, as here.
set -euo pipefail
cd "$(dirname "$0")/.."
output_root=results
seeds="0 1 2 3 4"
benchmark=""
datasets=""
methods="vi refined_vi vi_equal_compute deep_ensemble mnf"
jobs=1
vi_checkpoint_root=""
variant=""
print_commands=false
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --benchmark=*) benchmark="${1#*=}" ;;
    --output_root=*) output_root="${1#*=}" ;;
    --seeds=*) seeds="${1#*=}" ;;
    --datasets=*) datasets="${1#*=}" ;;
    --methods=*) methods="${1#*=}" ;;
    --jobs=*) jobs="${1#*=}" ;;
    --vi_checkpoint_root=*) vi_checkpoint_root="${1#*=}" ;;
    --variant=*) variant="${1#*=}" ;;
    --print_commands) print_commands=true ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "error: unknown argument '$1'; allowed: --benchmark, --output_root, --seeds, --datasets, --methods, --jobs, --vi_checkpoint_root, --variant, --print_commands, -- FLAGS" >&2
       exit 2 ;;
  esac
  shift
done
[[ "$benchmark" =~ ^(uci|image|resnet)$ ]] || { echo "error: --benchmark='$benchmark' must be uci, image or resnet" >&2; exit 2; }
[[ -n "$datasets" ]] || { echo "error: --datasets is empty" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: --jobs=$jobs must be a positive integer" >&2; exit 2; }
vi_checkpoint_root="${vi_checkpoint_root:-$output_root}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
if $print_commands; then
  exec python -m runner.table_commands --benchmark="$benchmark" --datasets="$datasets" \
    --methods="$methods" --seeds="$seeds" --output_root="$output_root" \
    --vi_checkpoint_root="$vi_checkpoint_root" --variant="$variant" --jobs="$jobs" -- "${extra[@]}"
fi
if [[ "$jobs" -gt 1 ]]; then
  export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1
fi

failures=$(mktemp)
finished=$(mktemp)   # one line per finished run, for the running count
run_one() {  # dataset method seed (runner/table_commands.py prints this same command)
  local group="$1${variant:+/$variant}"
  local dir="$output_root/$benchmark/$group/$2/seed_$3"
  local status headline count
  mkdir -p "$dir"
  if python -m "$benchmark.main" --dataset="$1" --method="$2" --seed="$3" --output_dir="$dir" \
      --vi_checkpoint_dir="$vi_checkpoint_root/$benchmark/$group/vi_checkpoints/seed_$3" "${extra[@]}" \
      >"$dir/log.txt" 2>&1; then
    # The binary prints its headline metrics last ("test_mll: -2.5800"), or says it had nothing to do.
    headline=$(grep -E '^(test_mll|test_accuracy|test_rmse): ' "$dir/log.txt" | tr '\n' ' ')
    grep -q "already holds this run" "$dir/log.txt" && headline="already made with these settings"
    status="done $group $2 seed $3: ${headline:-see $dir/log.txt}"
  else
    local reason
    reason=$(grep '^error:' "$dir/log.txt" | tail -1)
    status="FAILED $group $2 seed $3: ${reason:-see $dir/log.txt}"
    echo "$status" >>"$failures"
  fi
  count=$(flock "$finished" sh -c 'echo x >>"$0"; wc -l <"$0"' "$finished")
  echo "[$count/$total_runs] $status"
}
export -f run_one
export output_root benchmark vi_checkpoint_root failures finished variant
export extra_flags="${extra[*]:-}"

job_list() {
  # The registry groups the methods into jobs: those that start from one trained model (vi,
  # refined_vi, vi_equal_compute; vogn, refined_vogn) run in order in one job.
  local groups
  groups=$(python -m methods.registry --jobs="$methods") || exit 2
  while read -r group; do
    for seed in $seeds; do for dataset in $datasets; do
      echo "$dataset $seed $group"
    done; done
  done <<<"$groups"
}

jobs_file=$(mktemp)
job_list >"$jobs_file"
total_runs=$(awk '{runs += NF - 2} END {print runs + 0}' "$jobs_file")
export total_runs
# Each line: dataset seed method...; its methods run in order.
xargs -P "$jobs" -L 1 bash -c 'set -u; extra=($extra_flags); dataset=$0; seed=$1; shift
  for method in "$@"; do run_one "$dataset" "$method" "$seed"; done' <"$jobs_file"
rm -f "$jobs_file" "$finished"
if [[ -s "$failures" ]]; then
  echo "$(wc -l <"$failures") run(s) failed:" >&2
  cat "$failures" >&2
  rm -f "$failures"
  exit 1
fi
rm -f "$failures"
