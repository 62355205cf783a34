#!/usr/bin/env bash
# The ResNet-20 table (paper Table 3): 4 variants x methods x seeds through common/run_table.sh.
#   resnet/run_table.sh [--variants="hybrid hybrid_bn full full_bn"] [--output_root=results]
#                       [--seeds="0 1 2"] [--datasets=cifar10] [--methods="..."] [--jobs=1] [--print_commands]
#                       [-- extra resnet.main flags]
# Runs go to <root>/resnet/<dataset>/<variant>/<method>/seed_<s>. The deep ensemble has no
# variational layers, so it runs once per batch-norm setting, under hybrid and hybrid_bn (the
# paper's Table 3 repeats those numbers in its full rows); the other flags are as in
# common/run_table.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
variants="hybrid hybrid_bn full full_bn"
methods="vi refined_vi vi_equal_compute deep_ensemble"
passed=()
for argument in "$@"; do
  case "$argument" in
    --variants=*) variants="${argument#*=}" ;;
    --methods=*) methods="${argument#*=}" ;;
    *) passed+=("$argument") ;;
  esac
done
# common/run_table.sh takes the flags after "--" last: ours go in front of them.
before=() after=()
seen_separator=false
for argument in "${passed[@]+"${passed[@]}"}"; do
  if [[ "$argument" == "--" ]]; then seen_separator=true; continue; fi
  if $seen_separator; then after+=("$argument"); else before+=("$argument"); fi
done
status=0
for variant in $variants; do
  case "$variant" in
    hybrid) flags=(--variational=hybrid --nobatchnorm) ;;
    hybrid_bn) flags=(--variational=hybrid --batchnorm) ;;
    full) flags=(--variational=full --nobatchnorm) ;;
    full_bn) flags=(--variational=full --batchnorm) ;;
    *) echo "error: unknown variant '$variant'; allowed: hybrid hybrid_bn full full_bn" >&2; exit 2 ;;
  esac
  variant_methods="$methods"
  if [[ "$variant" == full* ]]; then
    variant_methods=$(echo "$methods" | tr ' ' '\n' | grep -vx deep_ensemble | tr '\n' ' ' || true)
  fi
  [[ -n "${variant_methods// /}" ]] || continue
  common/run_table.sh --benchmark=resnet --datasets=cifar10 --seeds="0 1 2" --variant="$variant" \
    --methods="$variant_methods" "${before[@]+"${before[@]}"}" -- "${flags[@]}" \
    "${after[@]+"${after[@]}"}" || status=1
done
exit "$status"
