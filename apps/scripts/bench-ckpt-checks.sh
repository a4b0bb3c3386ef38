#!/usr/bin/env bash
# The time the checks before a commit add to a save (issue 23), for a
# gpt2-124m-shaped state (parameters and both AdamW moments, 1.49 GB), at 1
# and 4 ranks, in both modes: meshbench ckpt times each save and, within it,
# what this rank spent in the checks (the NaN/Inf scan of every value
# written, each shard opened again, the checkpoint read back and checked by
# rank 0 before the rename); reported as the slowest rank's check time over
# the save's wall time, the median over interleaved repetitions (goal: under
# 5%).
#   apps/scripts/bench-ckpt-checks.sh [BUILD_DIR] [REPS] [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
REPS=${2:-3}
DIR=${3:-outputs/bench-ckpt-checks}
source apps/scripts/env.sh "$BUILD" >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$DIR"
echo "# load before: $(uptime)"
for np in 1 4; do
  mpirun --oversubscribe -n "$np" "$BUILD/bin/meshbench" ckpt --model gpt2-124m --reps "$REPS" \
    --dir "$DIR/run" --json "$DIR/bench-ckpt-checks.jsonl" > "$DIR/np$np.log"
  grep -E "^# meshbench ckpt:|^# pre-commit checks" "$DIR/np$np.log" | sed "s/^/[$np rank(s)] /"
done
echo "# load after: $(uptime)"
