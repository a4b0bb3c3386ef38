#!/usr/bin/env bash
# OpenMP fork-joins and barriers per training step on the CPU: one rank,
# THREADS threads, the model at fp32 and bf16, counted by an LD_PRELOAD
# shim (apps/scripts/omp_count.c) over runs of S1 and S2 steps, the
# difference divided by S2 - S1 (start-up and the end's checkpoint cancel).
# OpenBLAS's own threads are not OpenMP's here and are not counted.
#   apps/scripts/bench-omp-count.sh [MODEL] [THREADS] [MICRO_BATCHES]
# Defaults: small, 2, 2 (the global batch = micro-batches x 2 rows).
# BUILD=DIR in the environment counts that build's meshtrain (built
# already; e.g. a build of another commit, for before/after figures)
# instead of setting up and building build/.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-small}
THREADS=${2:-2}
MB=${3:-2}
OUT=outputs/bench-omp-count
mkdir -p "$OUT"
if [ -z "${BUILD:-}" ]; then
  BUILD=build
  bash apps/scripts/setup.sh build >/dev/null
fi
source apps/scripts/env.sh "$BUILD" >/dev/null
gcc -O2 -Wall -Wextra -Werror -shared -fPIC apps/scripts/omp_count.c -o "$OUT/omp_count.so" -ldl
[ -f "$OUT/corpus.txt" ] || "$BUILD/bin/meshdata" corpus "$OUT/corpus.txt" --bytes 300000 >/dev/null
count() { # PRECISION STEPS: "parallel barrier loop_end"
  rm -f "$OUT/count.txt"
  OMP_COUNT_OUT=$PWD/$OUT/count.txt LD_PRELOAD=$PWD/$OUT/omp_count.so OMP_NUM_THREADS=$THREADS \
    "$BUILD/bin/meshtrain" --set model.preset="$MODEL" --set train.steps="$2" \
    --set train.precision="$1" --set train.threads="$THREADS" --set train.micro_batch=2 \
    --set train.global_batch=$((2 * MB)) --set data.train="$OUT/corpus.txt" \
    --set train.eval_every=0 --set ckpt.mode=none --set metrics.peak_gflops=1 \
    --set output.dir="$OUT/run" > "$OUT/run.log" 2>&1 || { cat "$OUT/run.log"; exit 1; }
  # (summed over every process that wrote: MPI's helper processes write zeros)
  awk '{p += $2; b += $4; l += $6} END {print p, b, l}' "$OUT/count.txt"
}
echo "model $MODEL, $THREADS threads, $MB micro-batches a step; per step:"
printf "%-6s %10s %18s %20s\n" precision regions "barrier calls" "loop-end calls"
for p in fp32 bf16; do
  read -r p1 b1 l1 < <(count "$p" 2)
  read -r p2 b2 l2 < <(count "$p" 4)
  printf "%-9s %10d %18d %20d\n" "$p" $(((p2 - p1) / 2)) $(((b2 - b1) / 2)) $(((l2 - l1) / 2))
done
echo "(barrier and loop-end calls are per thread: a barrier is THREADS calls)"
