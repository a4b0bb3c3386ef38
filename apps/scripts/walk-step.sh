#!/usr/bin/env bash
# The walk of one training step through the modules (ARCHITECTURE.md, "The
# walk of a step"): builds meshtrain from SRC (default: this checkout) with
# -finstrument-functions into SRC/build-walk, runs the default job's layout
# (small, dp = 4, ZeRO-1; 3 steps on 4 ranks) and tiny at tp = 2 x pp = 2,
# records on rank 0 every distinct call of the second loop iteration (from
# one entry of the loop's load_batch to the next), and prints for each the
# modules and files entered, the hand-offs between modules, the upward ones
# and the callbacks: for the whole iteration, and for the step proper (what
# the loop's calls into ROOTS reach; default the step of lib/parallel).
#   apps/scripts/walk-step.sh [SRC] [ROOTS]
# Needs objdump and addr2line (binutils). Takes a few minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "${1:-$here/../..}" && pwd)
roots=${2:-mt_step_gradients,mt_step_update}
out="$src/build-walk/walk"
mkdir -p "$out"
cc -O2 -fPIC -c "$here/walk/tracer.c" -o "$out/tracer.o"
cmake -S "$src" -B "$src/build-walk" -DMT_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_C_FLAGS=-g -finstrument-functions -fno-inline-functions-called-once" \
  "-DCMAKE_EXE_LINKER_FLAGS=$out/tracer.o -rdynamic" > "$out/cmake.log"
rm -f "$src/build-walk/bin/meshtrain" # relinked with this tracer
cmake --build "$src/build-walk" -j"$(nproc)" --target meshtrain meshdata > "$out/build.log"
bin="$src/build-walk/bin"
launcher=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ -f "$out/corpus.txt" ] || "$bin/meshdata" corpus "$out/corpus.txt" --bytes 1000000 > /dev/null
mark=$(nm "$bin/meshtrain" | awk '$3 == "load_batch" {print "0x" $1}')
walk() { # NAME NP ARGS...
  local name=$1 np=$2; shift 2
  MT_TRACE_MARK=$mark MT_TRACE_OUT="$out/$name.edges" "${launcher[@]}" -n "$np" \
    -x MT_TRACE_MARK -x MT_TRACE_OUT "$bin/meshtrain" "$@" --set train.steps=3 \
    --set train.eval_every=0 --set ckpt.mode=none --set data.train="$out/corpus.txt" \
    --set output.dir="$out/$name" > "$out/$name.log" 2>&1
  echo "== $name: the loop iteration"
  python3 "$here/walk/walk.py" "$bin/meshtrain" "$out/$name.edges" "$src/CMakeLists.txt"
  echo "== $name: the step ($roots)"
  python3 "$here/walk/walk.py" "$bin/meshtrain" "$out/$name.edges" "$src/CMakeLists.txt" \
    --roots="$roots" -v
}
walk default 4 "$src/inputs/default.ini"
walk tp2pp2 4 --set model.preset=tiny --set model.n_layer=4 --set parallel.tp=2 \
  --set parallel.pp=2 --set parallel.zero=1 --set train.global_batch=8 --set train.micro_batch=2
