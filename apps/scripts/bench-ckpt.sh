#!/usr/bin/env bash
# The checkpoint figures of issue 14 in one go, for a gpt2-124m-shaped state
# (parameters and both AdamW moments, 1.49 GB):
#   1. meshbench ckpt at 1 and 4 ranks: save and load in both modes as ratios
#      of raw POSIX I/O in the same run, the asynchronous save's blocking
#      ratio (medians of interleaved repetitions);
#   2. meshckpt convert at 1 and 2 ranks: throughput (GB/s of the state read
#      and written again) and the peak RSS of the largest rank, for
#      per-writer -> shared, shared -> per-writer and fp32 -> bf16 parameters.
#   apps/scripts/bench-ckpt.sh [BUILD_DIR] [REPS] [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
REPS=${2:-5}
DIR=${3:-outputs/bench-ckpt}
source apps/scripts/env.sh "$BUILD" >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# mpirun refuses root unless told (containers, CI)
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/convert.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "# load before: $(uptime)"
for np in 1 4; do
  mpirun --oversubscribe -n "$np" "$BUILD/bin/meshbench" ckpt --reps "$REPS" --dir "$DIR" \
    --json "$DIR/bench-ckpt.jsonl"
done
mpirun --oversubscribe -n 2 "$BUILD/bin/meshbench" ckpt --save-to "$WORK/src" --mode per-writer
printf "# %-28s %5s %10s %10s %14s\n" convert ranks seconds "GB/s" "peak_RSS_MiB"
for np in 1 2; do
  for case in "to_shared|per-writer -> shared|$WORK/src/step_1|--mode shared" \
              "to_pw|shared -> per-writer|$WORK/to_shared-$np/step_1|--mode per-writer" \
              "to_bf16|fp32 -> bf16 parameters|$WORK/src/step_1|--mode per-writer --dtype bf16"; do
    IFS='|' read -r id name src args <<< "$case"
    out="$WORK/$id-$np"
    # shellcheck disable=SC2086
    log=$(mpirun --oversubscribe -n "$np" "$BUILD/bin/meshckpt" convert "$src" "$out" $args --buffer-mb 64)
    python3 - "$name" "$np" "$log" <<'PY'
import re, sys
name, np, log = sys.argv[1], sys.argv[2], sys.argv[3]
m = re.search(r"read ([0-9.]+) GB, wrote ([0-9.]+) GB in ([0-9.]+) s .*peak RSS ([0-9.]+) MiB", log)
r, w, s, rss = map(float, m.groups())
print(f"  {name:<28} {np:>5} {s:10.2f} {(r + w) / s:10.3f} {rss:14.1f}")
PY
  done
done
echo "# GB/s: bytes read plus bytes written, over the wall time of the conversion"
echo "# load after: $(uptime)"
