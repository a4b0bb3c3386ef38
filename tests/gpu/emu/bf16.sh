# tiny, 20 steps, on the emulated GPU: bf16 (bf16 operands, fp32
# accumulation; fp32 master weights, gradients and moments), converted in a
# pass of its own and rounded inside cuBLASLt (MT_CUDA_BF16_GEMM=fast),
# against fp32 on the same emulated GPU: every step's loss within 1e-3
# relative (seen: 4e-5; operands carry 2^-8 relative rounding, and the
# step's loss averages thousands of products), never bit-equal to fp32 (the
# bf16 path ran), and summary.json names the precision and gemm path.
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
   --set train.micro_batch=4 --set data.train="$corpus" --set train.eval_every=0
   --set ckpt.mode=none --set train.device=cuda)
train fp32 1 "${C[@]}" --set train.precision=fp32 --set output.dir="$WORK/fp32"
train bf16 1 "${C[@]}" --set train.precision=bf16 --set output.dir="$WORK/bf16"
MT_CUDA_BF16_GEMM=fast train bf16f 1 "${C[@]}" --set train.precision=bf16 \
  --set output.dir="$WORK/bf16f"
python3 - "$WORK" <<'PY'
import json, math, sys
w = sys.argv[1]
def curve(d): return [json.loads(l)["loss"] for l in open("%s/%s/metrics.jsonl" % (w, d))]
ref = curve("fp32")
for run, gemm in (("bf16", "bf16"), ("bf16f", "bf16-fast")):
    c = curve(run)
    assert len(c) == 20 == len(ref), (run, len(c))
    err = max(abs(a - b) / abs(a) if math.isfinite(b) else math.inf for a, b in zip(ref, c))
    print("%-6s max relative loss difference to fp32 over 20 steps: %.2e" % (run, err))
    if not err <= 1e-3: sys.exit("FAIL: %s is %.2e off fp32 (tolerance 1e-3)" % (run, err))
    if c == ref: sys.exit("FAIL: %s gives fp32's losses bit for bit: the bf16 path did not run" % run)
    d = json.load(open("%s/%s/summary.json" % (w, run)))["device"]
    if d["precision"] != "bf16" or d["gemm"] != gemm: sys.exit("FAIL: %s: %s" % (run, d))
PY
echo PASS
