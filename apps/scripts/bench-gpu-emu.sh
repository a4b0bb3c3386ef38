#!/usr/bin/env bash
# The CUDA backend on the CPU (tests/gpu/emu): what the gpu-emu tests cost
# and what they run.
#   - the build of what they need (build-emu-bench/, target gpu_emu_all):
#     wall and CPU seconds, from a clean build directory;
#   - ctest -L gpu-emu on this machine's cores: wall and CPU seconds, and
#     each test's seconds (CTest's);
#   - tiny, 20 steps, on one emulated GPU over the same run on the CPU
#     backend (the baseline, measured in this run): the emulator's slowdown;
#   - kernel launches, blocks and threads of gpu_ops, gpu_moe_ops and
#     gpu_edges (fp32), and of the emulated tiny run;
#   - how every group's device traffic travelled in the layouts of the
#     gpu-emu.layouts test.
#   apps/scripts/bench-gpu-emu.sh [BUILD_DIR]     (default build-emu-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-emu-bench}
OUT=outputs/bench-gpu-emu
JOBS=$(nproc 2>/dev/null || echo 2)
rm -rf "$B" "$OUT"; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1
t0=$(date +%s)
/usr/bin/time -f "%e %U %S" -o "$OUT/build.time" bash -c "
  cmake -S . -B '$B' -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_CUDA_EMU=ON >/dev/null &&
  cmake --build '$B' -j $JOBS --target gpu_emu_all >/dev/null"
/usr/bin/time -f "%e %U %S" -o "$OUT/ctest.time" bash -c \
  "cd '$B' && ctest -L gpu-emu -j $JOBS --output-junit '$PWD/$OUT/junit.xml' > '$PWD/$OUT/ctest.log' 2>&1" ||
  { tail -30 "$OUT/ctest.log"; echo "bench-gpu-emu: a gpu-emu test failed" >&2; exit 1; }
source apps/scripts/env.sh "$B"
"$B/bin/meshdata" corpus "$OUT/corpus.txt" --bytes 400000 >/dev/null
C=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8 --set train.micro_batch=4
   --set data.train="$OUT/corpus.txt" --set train.eval_every=0 --set ckpt.mode=none)
mpirun -n 1 "$B/bin/meshtrain" "${C[@]}" --set output.dir="$OUT/cpu" > "$OUT/cpu.log" 2>&1
MT_EMU_GPUS=1 MT_EMU_STATS="$OUT/tiny.stats" mpirun -n 1 "$B/bin/meshtrain" "${C[@]}" \
  --set train.device=cuda --set output.dir="$OUT/gpu" > "$OUT/gpu.log" 2>&1
for p in gpu_ops gpu_moe_ops gpu_edges; do
  MT_EMU_GPUS=1 MT_EMU_STATS="$OUT/$p.stats" mpirun -n 1 "$B/tests/$p" fp32 > "$OUT/$p.log" 2>&1
done
python3 - "$OUT" "$B" "$JOBS" <<'PY'
import glob, json, os, sys, xml.etree.ElementTree as ET
out, b, jobs = sys.argv[1], sys.argv[2], sys.argv[3]
def t(name): return [float(x) for x in open("%s/%s.time" % (out, name)).read().split()]
bw, bu, bs = t("build")
cw, cu, cs = t("ctest")
print("build of gpu_emu_all (%s, -j %s): %.0f s wall, %.0f s CPU" % (b, jobs, bw, bu + bs))
print("ctest -L gpu-emu (-j %s): %.0f s wall, %.0f s CPU" % (jobs, cw, cu + cs))
for c in sorted(ET.parse(out + "/junit.xml").getroot().iter("testcase"),
                key=lambda c: -float(c.get("time", 0))):
    print("  %-26s %6.1f s  %s" % (c.get("name"), float(c.get("time", 0)), c.get("status")))
step = {r: json.load(open("%s/%s/summary.json" % (out, r)))["mean_step_s"] for r in ("cpu", "gpu")}
print("tiny, 20 steps: mean step %.3f s on the emulated GPU, %.3f s on the CPU backend: %.1fx"
      % (step["gpu"], step["cpu"], step["gpu"] / step["cpu"]))
for p in ("gpu_ops", "gpu_moe_ops", "gpu_edges", "tiny"):
    s = json.loads(open("%s/%s.stats" % (out, p)).read().strip().splitlines()[-1])
    print("  %-12s %6d launches %9d blocks %11d threads %11d switches" %
          (p, s["launches"], s["blocks"], s["threads"], s["switches"]))
print("device traffic per group in gpu-emu.layouts' runs (path, device calls on rank 0):")
for f in sorted(glob.glob(b + "/test-tmp/emu-layouts/*/summary.json")):
    name = os.path.basename(os.path.dirname(f))
    if name.endswith(".cpu"): continue
    d = json.load(open(f))["device"]
    print("  %-14s %s%s" % (name, ", ".join("%s %s (%d)" % (k, v["path"],
          v["direct_calls"] + v["staged_calls"]) for k, v in d["groups"].items()
          if v["path"] != "none"), "; GPUs shared" if d["gpus_shared"] else ""))
PY
echo "bench-gpu-emu: $(( $(date +%s) - t0 )) s in all; outputs in $OUT"
