#!/usr/bin/env bash
# The GPU check, one script (issue: GPU backend). On a machine with a GPU:
#   1. checks what the build needs, and says what is missing;
#   2. builds meshtrain with CUDA for this GPU's architecture (build-gpu/);
#   3. runs the GPU tests: ctest -L gpu (every op against the CPU backend,
#      fp32 and bf16, and at the edges of their shapes; tiny CPU vs GPU;
#      bf16 vs fp32; dp/tp+sp/pp/ZeRO-3 on one GPU through staging;
#      checkpoints GPU <-> CPU; memory = plan; a layout that does not fit);
#      with two GPUs or more, dp 2, tp 2 and pp 2 over NCCL (device path
#      nccl, the staged run's losses);
#   4. meshbench gemm on the GPU at gpt2-124m's shapes (fp32, bf16,
#      bf16-fast) and meshbench devices;
#   5. the benchmark: gpt2-124m, T = 1024, bf16, one GPU, the largest
#      micro-batch the plan says fits: tokens/s, MFU against the GPU's bf16
#      peak, the step-time breakdown, and (a second, short run with
#      MT_CUDA_OP_TIMES=1) each op's share of GPU time, attention's too.
#
#   bash tests/gpu/check.sh [OUT_DIR]   (OUT_DIR: $OUT, else build-gpu/check)
#
# Writes 8 files into OUT_DIR (nothing deeper): check.log (all of this
# script's output), results.json (every figure and verdict), ctest.log,
# gemm.jsonl, bench.log, bench_metrics.jsonl, bench_summary.json,
# ops_summary.json. Each phase has a time budget so the whole stays under 8
# minutes on one GPU; a phase cut by its budget is reported as such.
# Exit 0 when the build and every GPU test pass and the benchmark ran; 1
# otherwise; 3 when prerequisites are missing (results.json lists them).
# MT_GPU_DEPS=DIR: a prefix holding dependencies built elsewhere (bin, lib,
# include, lib/pkgconfig), added to the search paths.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUTDIR=${1:-${OUT:-$ROOT/build-gpu/check}}
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/check.log") 2>&1
T0=$(date +%s)
BUILD=$ROOT/build-gpu
WORK=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OMP_WAIT_POLICY=passive
if [ -n "${MT_GPU_DEPS:-}" ]; then
  export PATH="$MT_GPU_DEPS/bin:$PATH" CMAKE_PREFIX_PATH="$MT_GPU_DEPS${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$MT_GPU_DEPS/lib/pkgconfig:$MT_GPU_DEPS/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$MT_GPU_DEPS/lib:$MT_GPU_DEPS/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -d "$MT_GPU_DEPS/share/openmpi" ] && export OPAL_PREFIX="$MT_GPU_DEPS"
fi
elapsed() { echo $(( $(date +%s) - T0 )); }
phase() { echo; echo "== [$(elapsed)s] $*"; }
RES="$WORK/results.env" # KEY=VALUE lines, turned into results.json at the end
: > "$RES"
put() { printf '%s=%s\n' "$1" "$2" >> "$RES"; }

finish() { # EXIT_CODE
  put total_s "$(elapsed)"
  python3 - "$RES" "$OUTDIR" "$1" <<'PY' || true
import json, os, sys
res, outdir, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = {}
for line in open(res):
    k, _, v = line.rstrip("\n").partition("=")
    try: r[k] = json.loads(v)
    except ValueError: r[k] = v
r["exit_code"] = code
def load(name):
    p = os.path.join(outdir, name)
    try: return json.load(open(p))
    except Exception: return None
gem = []
try:
    gem = [json.loads(l) for l in open(os.path.join(outdir, "gemm.jsonl"))]
except Exception: pass
r["gemm"] = [{k: g.get(k) for k in ("precision", "gemm_path", "gpu", "tokens", "gflops_weighted",
              "gflops_peak_shape", "peak_shape")} for g in gem]
s = load("bench_summary.json")
if s:
    d = s.get("device", {})
    b = r.setdefault("bench", {})
    for k in ("model", "tokens_per_step", "mean_step_s", "tokens_per_s", "mfu", "flops_per_token",
              "peak_flops", "peak_source", "hw_profile", "first_loss", "final_loss"):
        b[k] = s.get(k)
    b["gpu"] = d.get("gpu"); b["gemm"] = d.get("gemm")
    b["tensor_bytes_peak"] = d.get("tensor_bytes_peak")
    b["backend_scratch_bytes"] = d.get("backend_scratch_bytes")
    b["mfu_goal_0.40_met"] = bool(s.get("mfu") is not None and s["mfu"] >= 0.40)
    try:
        recs = [json.loads(l) for l in open(os.path.join(outdir, "bench_metrics.jsonl"))][1:]
        if recs:
            keys = ("step_s", "compute_s", "optim_s", "data_s", "dp_comm_s", "eval_s", "ckpt_s")
            b["breakdown_mean_s"] = {k: sum(x.get(k, 0) for x in recs) / len(recs) for k in keys}
    except Exception: pass
o = load("ops_summary.json")
if o and "op_seconds" in o.get("device", {}):
    ops = o["device"]["op_seconds"]; tot = sum(ops.values())
    r["gpu_time_by_op"] = {k: {"s": v, "share": v / tot if tot else 0} for k, v in
                           sorted(ops.items(), key=lambda kv: -kv[1])}
    # the model's block attention (attn_*), and the T x T reference if a run
    # used it; an op's bf16 calls are named "bf16 <op>"
    def share(*names): return sum(ops.get(p + k, 0) for k in names for p in ("", "bf16 "))
    att = share("attn_forward", "attn_merge", "attn_backward", "attn_backward_first",
                "attention_forward", "attention_backward")
    mm = share("matmul_forward", "matmul_backward", "matmul_backward_first")
    r.setdefault("bench", {})["attention_share_of_gpu_time"] = att / tot if tot else None
    r["bench"]["matmul_share_of_gpu_time"] = mm / tot if tot else None
json.dump(r, open(os.path.join(outdir, "results.json"), "w"), indent=2, sort_keys=True)
print(json.dumps(r, indent=2, sort_keys=True))
PY
  rm -rf "$WORK"
  echo "== check.sh: exit $1 after $(elapsed)s; results in $OUTDIR/results.json"
  exit "$1"
}

# ---------------------------------------------------------------- 1
phase "prerequisites"
missing=()
have() { command -v "$1" >/dev/null 2>&1; }
have nvidia-smi || missing+=("nvidia-smi (no NVIDIA driver)")
have nvcc || missing+=("nvcc (CUDA toolkit)")
have cmake || missing+=("cmake >= 3.18")
have mpicc || missing+=("mpicc (MPI: openmpi-bin libopenmpi-dev)")
have mpirun || missing+=("mpirun")
have python3 || missing+=("python3")
have pkg-config || missing+=("pkg-config")
if have pkg-config; then
  for p in inih libcjson libxxhash; do pkg-config --exists "$p" || missing+=("$p (pkg-config)"); done
fi
exists_any() { for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }
exists_any /usr/include/cblas.h /usr/include/*/cblas.h /usr/include/*/openblas*/cblas.h \
  "${MT_GPU_DEPS:-/nonexistent}"/include/cblas.h || missing+=("cblas.h (libopenblas-dev)")
{ have h5pcc || exists_any /usr/include/hdf5/openmpi/hdf5.h "${MT_GPU_DEPS:-/nonexistent}"/include/hdf5.h; } ||
  missing+=("parallel HDF5 (libhdf5-openmpi-dev)")
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
echo "GPU: ${gpu_name:-none} (sm_${cap:-?}, ${gpu_mib:-?} MiB); nvcc: $(nvcc --version 2>/dev/null | tail -1)"
put gpu "\"${gpu_name:-none}\""
put gpu_memory_mib "${gpu_mib:-0}"
# MT_CHECK_DRY=1: go on without a GPU (to test this script itself; the GPU
# tests then skip and the benchmark fails)
if [ -z "$gpu_name" ] && [ -z "${MT_CHECK_DRY:-}" ]; then missing+=("a visible GPU"); fi
if [ -n "${MT_CHECK_DRY:-}" ]; then
  missing=("${missing[@]/nvidia-smi (no NVIDIA driver)/}")
  missing=($(printf '%s\n' "${missing[@]}" | sed '/^$/d' | tr ' ' '_'))
  missing=("${missing[@]//_/ }")
  gpu_mib=${gpu_mib:-81920}
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'missing: %s\n' "${missing[@]}"
  put status '"blocked: prerequisites missing"'
  put missing "$(printf '%s\n' "${missing[@]}" | python3 -c 'import json,sys; print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))' 2>/dev/null || echo '[]')"
  finish 3
fi

# ---------------------------------------------------------------- 2
phase "build (CUDA architecture ${cap:-90})"
tb=$(date +%s)
if ! timeout 300 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON \
     -DCMAKE_CUDA_ARCHITECTURES="${cap:-90}" > "$WORK/configure.log" 2>&1; then
  tail -30 "$WORK/configure.log"; put status '"build failed (configure)"'; finish 1
fi
grep "meshtrain: CUDA backend" "$WORK/configure.log"
grep -q "CUDA backend ON" "$WORK/configure.log" || { put status '"CUDA not found by CMake"'; finish 1; }
if ! timeout $((300 - ($(date +%s) - tb))) cmake --build "$BUILD" -j "$(nproc)" > "$WORK/build.log" 2>&1; then
  grep -E -A5 "error|Error" "$WORK/build.log" | head -40; put status '"build failed"'; finish 1
fi
put build_s "$(( $(date +%s) - tb ))"
echo "built in $(( $(date +%s) - tb ))s"
"$BUILD/bin/meshbench" devices | tee "$WORK/devices.txt"

# ---------------------------------------------------------------- 3
phase "GPU tests: ctest -L gpu"
(cd "$BUILD" && timeout 300 ctest -L gpu -j 3 --timeout 240 --output-on-failure \
   --output-junit "$WORK/gpu-junit.xml") > "$OUTDIR/ctest.log" 2>&1
ctest_rc=$?
tail -25 "$OUTDIR/ctest.log"
put ctest_rc "$ctest_rc"
python3 - "$WORK/gpu-junit.xml" >> "$RES" <<'PY' || true
import json, sys, xml.etree.ElementTree as ET
t = ET.parse(sys.argv[1]).getroot()
res = {}
for c in t.iter("testcase"):
    st = c.get("status") or ("failed" if c.find("failure") is not None else "run")
    st = {"notrun": "skipped", "run": "passed", "fail": "failed"}.get(st, st)
    res[c.get("name")] = {"status": st, "time_s": round(float(c.get("time", 0)), 1)}
print("gpu_tests=" + json.dumps(res))
print("gpu_tests_passed=%d" % sum(v["status"] == "passed" for v in res.values()))
print("gpu_tests_skipped=%d" % sum(v["status"] == "skipped" for v in res.values()))
print("gpu_tests_failed=%d" % sum(v["status"] == "failed" for v in res.values()))
PY

# ---------------------------------------------------------------- 3b
# Two GPUs or more: the NCCL paths themselves (the tests above share one
# GPU, which stages every multi-rank layout through host MPI): dp 2, tp 2
# (with sequence parallelism) and pp 2 on two ranks with a GPU each must
# report device path nccl for their group and follow, step by step within
# 1e-4, the same layout staged on one GPU.
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
two_ok=1
if [ "${n_gpus:-0}" -ge 2 ]; then
  phase "two GPUs: dp 2, tp 2, pp 2 over NCCL against the same layouts staged on one GPU"
  "$BUILD/bin/meshdata" corpus "$WORK/corpus2.txt" --bytes 400000 > /dev/null
  C2=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
      --set data.train="$WORK/corpus2.txt" --set train.eval_every=0 --set ckpt.mode=none
      --set train.device=cuda)
  declare -A L2=([dp]="--set parallel.dp=2 --set train.micro_batch=2"
                 [tp]="--set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4"
                 [pp]="--set parallel.pp=2 --set train.micro_batch=2")
  for axis in dp tp pp; do
    # shellcheck disable=SC2086
    timeout 120 mpirun -n 2 "$BUILD/bin/meshtrain" "${C2[@]}" ${L2[$axis]} \
      --set output.dir="$WORK/two_$axis" > "$WORK/two_$axis.log" 2>&1 || two_ok=0
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=0 timeout 120 mpirun -n 2 -x CUDA_VISIBLE_DEVICES "$BUILD/bin/meshtrain" \
      "${C2[@]}" ${L2[$axis]} --set output.dir="$WORK/one_$axis" > "$WORK/one_$axis.log" 2>&1 ||
      two_ok=0
    python3 tests/scripts/compare_runs.py "$WORK/one_$axis" "$WORK/two_$axis" --rtol 1e-4 \
      --steps 10 || two_ok=0
    python3 - "$WORK" "$axis" <<'PY' || two_ok=0
import json, sys
w, axis = sys.argv[1], sys.argv[2]
two = json.load(open("%s/two_%s/summary.json" % (w, axis)))["device"]
one = json.load(open("%s/one_%s/summary.json" % (w, axis)))["device"]
print("%s 2: two GPUs %s (shared %d), one GPU %s (shared %d)" %
      (axis, two[axis], two["gpus_shared"], one[axis], one["gpus_shared"]))
if two[axis] != "nccl" or one[axis] != "staged": sys.exit("FAIL: device paths")
PY
  done
  put two_gpu "$([ $two_ok = 1 ] && echo '"pass"' || echo '"fail"')"
else
  put two_gpu '"skipped: fewer than two GPUs visible"'
fi

# ---------------------------------------------------------------- 4
phase "meshbench gemm on the GPU (gpt2-124m shapes, 16384 tokens)"
: > "$OUTDIR/gemm.jsonl"
for p in bf16 fp32 bf16-fast; do
  prec=${p%-fast}
  envs=(); [ "$p" = bf16-fast ] && envs=(MT_CUDA_BF16_GEMM=fast)
  env "${envs[@]}" timeout 90 "$BUILD/bin/meshbench" gemm --device cuda --precision "$prec" \
    --model gpt2-124m --tokens 16384 --reps 10 --json "$OUTDIR/gemm.jsonl" | grep "^# step" |
    sed "s/^/$p: /"
done

# ---------------------------------------------------------------- 5
phase "benchmark: gpt2-124m, T=1024, bf16, one GPU"
"$BUILD/bin/meshdata" corpus "$WORK/corpus.txt" --bytes 8000000 > /dev/null
bench=(--set model.preset=gpt2-124m --set train.device=cuda --set train.precision=bf16
       --set data.train="$WORK/corpus.txt" --set train.eval_every=0 --set ckpt.mode=none
       --set train.warmup_steps=2 --set train.lr=6e-4)
# the largest micro-batch whose planned tensors take at most 85% of the GPU
B=0
for b in 96 80 64 48 40 32 24 16 8 4; do
  "$BUILD/bin/meshtrain" "${bench[@]}" --set train.micro_batch=$b --set train.global_batch=$b \
    --plan --plan-json "$WORK/plan$b.json" > /dev/null 2>&1 || continue
  mib=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['ranks'][0]; \
print(round(sum(r['mem_bytes'].values()) / 1048576))" "$WORK/plan$b.json")
  if [ -n "$mib" ] && [ "$mib" -le $(( ${gpu_mib:-0} * 85 / 100 )) ]; then
    B=$b; echo "micro-batch $b: plan $mib MiB of ${gpu_mib} MiB"; break
  fi
done
[ "$B" -gt 0 ] || { put status '"no micro-batch fits"'; finish 1; }
put bench_micro_batch "$B"
STEPS=${MT_BENCH_STEPS:-12}
timeout 240 mpirun -n 1 "$BUILD/bin/meshtrain" "${bench[@]}" --set train.micro_batch=$B \
  --set train.global_batch=$B --set train.steps=$STEPS --set output.dir="$WORK/bench" \
  > "$OUTDIR/bench.log" 2>&1
bench_rc=$?
tail -6 "$OUTDIR/bench.log"
cp "$WORK/bench/summary.json" "$OUTDIR/bench_summary.json" 2>/dev/null
cp "$WORK/bench/metrics.jsonl" "$OUTDIR/bench_metrics.jsonl" 2>/dev/null
put bench_rc "$bench_rc"
# each op's GPU time: a short run with the timers on
MT_CUDA_OP_TIMES=1 timeout 120 mpirun -n 1 "$BUILD/bin/meshtrain" "${bench[@]}" \
  --set train.micro_batch=$B --set train.global_batch=$B --set train.steps=4 \
  --set output.dir="$WORK/ops" > "$WORK/ops.log" 2>&1 || tail -5 "$WORK/ops.log"
cp "$WORK/ops/summary.json" "$OUTDIR/ops_summary.json" 2>/dev/null

skipped=$(sed -n 's/^gpu_tests_skipped=//p' "$RES")
if [ "$ctest_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "${skipped:-1}" -eq 0 ] && [ "$two_ok" = 1 ]; then
  put status '"pass"'; finish 0
fi
put status '"fail"'
finish 1
