#!/usr/bin/env bash
# Which GEMM library for the CPU: the build's (OpenBLAS sgemm, Debian's
# oneDNN for bf16, as meshbench gemm-bf16 times them) beside the newest of
# the Python registry (oneDNN 3.x from `onednn-devel`, oneMKL from
# `mkl-devel`: sgemm and cblas_gemm_bf16bf16f32), at gpt2-124m's step shapes
# (tokens 1024), in the same run.
#   apps/scripts/bench-gemm-libs.sh [THREADS] [REPS]
# THREADS (default 1) pinned, one a core; REPS (default 5) timed calls per
# shape and library, median. The clock is the process's CPU time over the
# threads (these machines are shared); say which CPU gave a figure you quote.
# The libraries go to a virtual environment in outputs/bench-gemm-libs/venv
# (about 1.5 GB, downloaded once). PyPI's oneDNN is built for the SYCL
# runtime: its CPU engine needs the OpenCL CPU runtime that comes with it
# (intel-opencl-rt), named here through OCL_ICD_FILENAMES.
# Writes outputs/bench-gemm-libs/{gemm-libs.jsonl,gemm-bf16.jsonl,*.txt}.
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${1:-1}
REPS=${2:-5}
OUT=outputs/bench-gemm-libs
mkdir -p "$OUT"
bash apps/scripts/setup.sh build >/dev/null
VENV=${GEMM_LIBS_VENV:-$OUT/venv} # an existing one may be named
if [ ! -x "$VENV/bin/pip" ] || ! ls "$VENV"/lib/libdnnl.so.3 >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet onednn-devel mkl-devel
fi
V=$(cd "$VENV" && pwd)
ls "$V"/lib/libdnnl.so.3 "$V"/lib/libmkl_rt.so.3 >/dev/null ||
  { echo "bench-gemm-libs: error: onednn-devel / mkl-devel gave no libdnnl.so.3 / libmkl_rt.so.3 in $V/lib" >&2; exit 2; }
gcc -O2 -std=gnu11 -Wall -Wextra -I"$V/include" apps/scripts/gemm_libs.c -o "$OUT/gemm_libs" \
  -L"$V/lib" -Wl,-rpath,"$V/lib" -l:libdnnl.so.3 -lopenblas -ldl -lm
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
export OMP_PLACES=cores OMP_PROC_BIND=close OMP_WAIT_POLICY=passive
export OCL_ICD_FILENAMES=$V/lib/libintelocl.so ONEAPI_DEVICE_SELECTOR=opencl:cpu
CPUS="0-$((THREADS - 1))"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1); load before: $(uptime)"
rm -f "$OUT/gemm-libs.jsonl" "$OUT/gemm-bf16.jsonl"
LD_LIBRARY_PATH=$V/lib taskset -c "$CPUS" "$OUT/gemm_libs" --threads "$THREADS" --reps "$REPS" \
  --json "$OUT/gemm-libs.jsonl" 2>&1 | grep -v '^onednn_verbose' | tee "$OUT/gemm-libs.txt"
# the build's own paths at the same shapes (Debian's oneDNN), and the limits
taskset -c "$CPUS" build/bin/meshbench gemm-bf16 --model gpt2-124m --tokens 1024 \
  --threads "$THREADS" --reps "$REPS" --clock cpu --peak --json "$OUT/gemm-bf16.jsonl" |
  tee "$OUT/gemm-bf16.txt"
echo "load after: $(uptime)"
python3 - "$OUT/gemm-libs.jsonl" "$OUT/gemm-bf16.jsonl" <<'PY'
import json, sys
libs = [json.loads(l) for l in open(sys.argv[1])][-1]
mb = [json.loads(l) for l in open(sys.argv[2])][-1]
lim32, lim16 = mb.get("limit_gflops_fp32"), mb.get("limit_gflops_onednn")
rows = [("OpenBLAS sgemm (build)", mb["step_gflops_fp32"], lim32),
        ("OpenBLAS sgemm (gemm_libs)", libs["step_gflops_openblas"], lim32),
        ("oneMKL sgemm", libs.get("step_gflops_mkl_sgemm"), lim32),
        ("bf16: Debian oneDNN (build)", mb.get("step_gflops_onednn"), lim16),
        ("bf16: oneDNN %s" % libs["onednn_version"], libs["step_gflops_onednn"], lim16),
        ("bf16: oneMKL gemm_bf16bf16f32", libs.get("step_gflops_mkl_bf16"), lim16)]
base = mb["step_gflops_fp32"]
print("\n%-32s %9s %8s %9s" % ("gpt2-124m step, %d thread(s)" % libs["threads"], "GFLOP/s", "x fp32", "of limit"))
for name, g, lim in rows:
    if not g or g < 0:
        print("%-32s %9s" % (name, "-")); continue
    print("%-32s %9.1f %8.2f %9s" % (name, g, g / base, "%.2f" % (g / lim) if lim else "-"))
print("(oneDNN %s implementation: %s)" % (libs["onednn_version"], libs["onednn_impl"]))
PY
