#!/usr/bin/env bash
# bf16 matmuls of the CPU backend beside fp32 sgemm at the model's shapes,
# in the same run (meshbench gemm-bf16; its --help says what each column is).
#   apps/scripts/bench-bf16.sh [REPS] [CLOCK]
# REPS: timed calls per shape and path (median; default 7). CLOCK: wall
# (default) or cpu (process CPU time per thread, for a machine other jobs
# share; say which in any figure you quote).
# 1. The peaks of one core: zmm fp32 FMA against zmm vdpbf16ps (the reason
#    the bf16 GEMM on CPUs without AMX converts to fp32 for sgemm).
# 2. small (C=384) at T=256 and gpt2-124m (C=768) at T=1024, micro-batch 4
#    (tokens 1024 and 4096), at 1 and 2 threads, each thread pinned to its
#    own core (OMP_PLACES=cores, OMP_PROC_BIND=close, taskset), every path
#    the build has: fp32 sgemm, bf16 on the sgemm path, bf16 on oneDNN.
# Writes outputs/bench-bf16/gemm-bf16.jsonl and prints a summary: per run
# the step-weighted GFLOP/s of each path and its ratio to fp32.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/setup.sh build
source apps/scripts/env.sh build
REPS=${1:-7}
CLOCK=${2:-wall}
OUT=outputs/bench-bf16
mkdir -p "$OUT"
rm -f "$OUT/gemm-bf16.jsonl"
NCORES=$(nproc)
export OMP_PLACES=cores OMP_PROC_BIND=close OMP_WAIT_POLICY=passive
echo "load before: $(uptime)"
run() { # THREADS meshbench-args...
  local threads=$1
  shift
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads taskset -c "0-$((threads - 1))" \
    build/bin/meshbench gemm-bf16 --threads "$threads" --reps "$REPS" --clock "$CLOCK" \
    --json "$OUT/gemm-bf16.jsonl" "$@"
}
run 1 --peak --model tiny --tokens 64 --reps 1 >"$OUT/peak.txt"
grep '^# peak' "$OUT/peak.txt"
rm -f "$OUT/gemm-bf16.jsonl" # the peak run's shapes are not a figure
for threads in 1 2; do
  if [ "$threads" -gt "$NCORES" ]; then
    echo "skipping $threads threads: this machine has $NCORES cores"
    continue
  fi
  run "$threads" --model small --tokens 1024 | tee "$OUT/small_t$threads.txt"
  run "$threads" --model gpt2-124m --tokens 4096 | tee "$OUT/gpt2-124m_t$threads.txt"
done
echo "load after: $(uptime)"
python3 - "$OUT/gemm-bf16.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n{'model':<10} {'tokens':>6} {'thr':>3} {'clock':>5} | {'fp32':>7} {'sgemm':>7} {'onednn':>7} | "
      f"{'sg/fp32':>7} {'dn/fp32':>7} | default")
for r in rows:
    f = r["step_gflops_fp32"]
    sg, dn = r.get("step_gflops_sgemm"), r.get("step_gflops_onednn")
    fmt = lambda x: f"{x:7.1f}" if x else "      -"
    rat = lambda x: f"{x / f:7.2f}" if x else "      -"
    print(f"{r['model']:<10} {r['tokens']:>6} {r['threads']:>3} {r['clock']:>5} | {f:7.1f} {fmt(sg)} "
          f"{fmt(dn)} | {rat(sg)} {rat(dn)} | {r['default_path']}")
print("(GFLOP/s of one step's matmuls, each shape weighted by its calls; median of the reps)")
PY
