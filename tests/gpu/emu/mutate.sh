#!/usr/bin/env bash
# The mutation check of the emulated GPU tests (run by hand, not in CI):
# three defects a first GPU run could hide, each planted in a copy of the
# tree in turn; the gpu-emu tests must fail on every one.
#   1. flash_sync:  a __syncthreads removed from the flash forward (V then
#                   overwrites K in shared memory while threads still read K);
#   2. smem_row:    the flash forward's shared buffer one row (hs + 1
#                   floats) short of what the kernel uses;
#   3. router_warp: a partial-warp early return in the MoE router, before
#                   its full-mask shuffles.
#   bash tests/gpu/emu/mutate.sh [WORK_DIR]     (default /tmp/meshtrain-mutate)
# Copies the working tree to WORK_DIR/src, builds it there with
# -DMT_CUDA_EMU=ON once, then per mutation rebuilds (the one .cu file) and
# runs ctest -L gpu-emu (but the bad-input tests), and prints which tests
# failed. Exits 0 when every mutation is caught, 1 otherwise.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
WORK=${1:-/tmp/meshtrain-mutate}
JOBS=$(nproc 2>/dev/null || echo 2)
rm -rf "$WORK"
mkdir -p "$WORK/src"
(cd "$SRC" && tar --exclude='./build*' --exclude=./.git --exclude='./outputs/*' -cf - .) |
  (cd "$WORK/src" && tar -xf -)
cd "$WORK/src" || exit 1
echo "== build ($WORK/src/build-emu)"
cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DMT_CUDA_EMU=ON > "$WORK/configure.log" 2>&1 &&
  cmake --build build-emu -j "$JOBS" --target gpu_emu_all > "$WORK/build.log" 2>&1 ||
  { tail -20 "$WORK/build.log"; exit 1; }

# mutate NAME FILE OLD NEW: FILE with the first OLD replaced by NEW
mutate() {
  python3 - "$2" "$3" "$4" <<'PY' || { echo "cannot apply the mutation to $2"; exit 1; }
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(path).read()
if old not in s: sys.exit(1)
open(path, "w").write(s.replace(old, new, 1))
PY
}
caught=0
run() { # NAME FILE OLD NEW
  local name=$1 file=$2
  cp "$file" "$WORK/$name.orig"
  mutate "$name" "$file" "$3" "$4"
  echo "== $name: $(diff "$WORK/$name.orig" "$file" | grep '^[<>]' | head -2 | tr '\n' ' ')"
  cmake --build build-emu -j "$JOBS" --target gpu_emu_all > "$WORK/$name.build.log" 2>&1 || { tail -20 "$WORK/$name.build.log"; exit 1; }
  (cd build-emu && ctest -L gpu-emu -E 'bad_|selftest' -j "$JOBS" > "$WORK/$name.ctest.log" 2>&1)
  local failed
  failed=$(sed -n 's/^[[:space:]]*[0-9]* - \(gpu-emu\.[a-z_0-9]*\) (.*/\1/p' "$WORK/$name.ctest.log" | tr '\n' ' ')
  if [ -n "$failed" ]; then
    caught=$((caught + 1))
    echo "   caught: failed $failed"
    grep -h "gpu-emu: error\|FAIL" build-emu/test-tmp/emu-*/*.log 2>/dev/null | sort | uniq -c |
      sort -rn | head -3 | cut -c1-220 | sed 's/^/   /'
  else
    echo "   NOT caught: every gpu-emu test passed"
  fi
  cp "$WORK/$name.orig" "$file"
  rm -rf build-emu/test-tmp
}
run flash_sync lib/kernels/cuda/attention_flash.cu \
  "    __syncthreads(); /* S is whole; every read of K is done */" \
  "    /* mutation: no barrier before V replaces K */"
run smem_row lib/kernels/cuda/attention_flash.cu \
  "  return (size_t)(BR + BC) * (hs + 1) + (size_t)BR * (BC + 1) + BR;" \
  "  return (size_t)(BR + BC - 1) * (hs + 1) + (size_t)BR * (BC + 1) + BR;"
run router_warp lib/kernels/cuda/moe.cu \
  "  const float *x = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  float m = -INFINITY;" \
  "  const float *x = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  if (lane >= E) return; /* mutation: lanes without an expert leave early */
  float m = -INFINITY;"
echo "== $caught of 3 mutations caught"
[ "$caught" -eq 3 ]
