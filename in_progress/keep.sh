#!/usr/bin/env bash
# Packs each run's checkpoints and logs (not its worktree) into in_progress/checkpoints_<run>.tar.gz
# to commit, so a new machine resumes where this one stopped. Run it between two checkpoint saves.
# Arguments are extra tar --exclude patterns, e.g. '*/checkpoints/refinement' to leave out a
# refinement's 46 MB of members (the run then refines again from its VI checkpoint).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
for name in fig5 t3_main; do
  [[ -d "$RUNS/$name" ]] || continue
  excludes=(--exclude='*.sh')
  for pattern in "$@"; do excludes+=(--exclude="$pattern"); done
  tar -czf "$here/checkpoints_$name.tar.gz" -C "$RUNS" "${excludes[@]}" "$name"
  echo "$here/checkpoints_$name.tar.gz: $(du -h "$here/checkpoints_$name.tar.gz" | cut -f1)"
done
