#!/usr/bin/env bash
# Packs each run's checkpoints and logs (not its worktree) into in_progress/checkpoints_<run>.tar.gz
# to commit, so a new machine resumes where this one stopped. Run it between two checkpoint saves.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
for name in fig5 t3_main; do
  [[ -d "$RUNS/$name" ]] || continue
  tar -czf "$here/checkpoints_$name.tar.gz" -C "$RUNS" --exclude='*.sh' "$name"
  echo "$here/checkpoints_$name.tar.gz: $(du -h "$here/checkpoints_$name.tar.gz" | cut -f1)"
done
