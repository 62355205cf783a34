# Shared by the in-progress scripts: where runs go and how their code is checked out.
RUNS=${RUNS:-/work/runs}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2
worktree() {  # worktree <path> <commit>: a detached worktree of the repository at <commit>
  [[ -d "$1" ]] || git -C "$REPO" worktree add --detach "$1" "$2" > /dev/null
  [[ "$(git -C "$1" rev-parse HEAD)" == "$(git -C "$REPO" rev-parse "$2")" ]] || {
    echo "error: $1 is not at $2" >&2; exit 1; }
}
