#!/usr/bin/env bash
# The gpu-emu suite under the emulator's stream modes (tests/gpu/emu,
# docs/cuda.md): once with MT_EMU_STREAMS=eager (each stream's work at once,
# in the host's order: the baseline, same machine, same run), then with
# MT_EMU_STREAMS=deferred under each seed given (MT_EMU_SEED picks which
# runnable stream advances next, so every seed is another interleaving).
# A missing stream synchronisation or event in the CUDA backend fails some
# seed. Prints each run's wall seconds and passed/total; exits non-zero when
# any run has a failure (its ctest log is kept under outputs/).
#   apps/scripts/bench-emu-streams.sh [BUILD_DIR] [SEED...]   (build-emu; 1 2 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-emu}
shift || true
SEEDS=("$@")
[ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for s in "${SEEDS[@]}"; do
  [[ "$s" =~ ^[0-9]+$ ]] || { echo "bench-emu-streams: seed '$s': a whole number" >&2; exit 2; }
done
[ -f "$B/CTestTestfile.cmake" ] ||
  { echo "bench-emu-streams: build dir '$B': not configured (cmake -DMT_CUDA_EMU=ON)" >&2; exit 2; }
OUT=$PWD/outputs/bench-emu-streams
JOBS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
run() { # NAME MODE SEED
  local name=$1 t0 t1 rc=0
  t0=$(date +%s.%N)
  (cd "$B" && MT_EMU_STREAMS=$2 MT_EMU_SEED=$3 ctest -L gpu-emu -j "$JOBS" --output-on-failure \
     > "$OUT/$name.log" 2>&1) || rc=$?
  t1=$(date +%s.%N)
  local summary
  summary=$(grep -Eo "[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+" "$OUT/$name.log" ||
            echo "no summary")
  printf "%-12s %8.1f s  %s\n" "$name" "$(echo "$t1 - $t0" | bc)" "$summary"
  [ $rc -eq 0 ] || { status=1; grep -E "\(Failed\)|\(Timeout\)|\*\*\*" "$OUT/$name.log" || true; }
}
printf "%-12s %10s  %s\n" run wall ctest
run eager eager 1
for s in "${SEEDS[@]}"; do run "deferred.$s" deferred "$s"; done
exit $status
