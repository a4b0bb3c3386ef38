# small, 50 steps: bf16 (the bf16 weights' copy and activations of mixed
# precision, fp32 accumulation, fp32 master weights, gradients and moments)
# against fp32 on the same GPU: the loss at step 50 within 2%, every step's
# loss finite, the curve falling, and the activations at most 0.55 of
# fp32's bytes.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 2000000)
C=(--set model.preset=small --set model.seq_len=128 --set train.steps=50 --set train.global_batch=16
   --set train.micro_batch=8 --set data.train="$corpus" --set train.eval_every=0
   --set ckpt.mode=none --set train.device=cuda)
train fp32 1 "${C[@]}" --set train.precision=fp32 --set output.dir="$WORK/fp32"
train bf16 1 "${C[@]}" --set train.precision=bf16 --set output.dir="$WORK/bf16"
python3 - "$WORK/fp32" "$WORK/bf16" <<'PY'
import json, math, sys
def curve(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")]
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert len(a) == 50 and len(b) == 50, (len(a), len(b))
assert all(x is not None and math.isfinite(x) for x in b), "a bf16 loss is not finite"
rel = abs(b[-1] - a[-1]) / abs(a[-1])
print("step 50: fp32 %.5f bf16 %.5f (relative %.2e); first %.4f -> %.4f" % (a[-1], b[-1], rel, b[0], b[-1]))
if not rel <= 0.02: sys.exit("FAIL: bf16 loss at step 50 is %.2f%% off fp32's" % (100 * rel))
if not b[-1] < b[0] - 0.5: sys.exit("FAIL: the bf16 loss did not fall")
s = json.load(open(sys.argv[2] + "/summary.json"))["device"]
if s["precision"] != "bf16" or not s["gemm"].startswith("bf16"): sys.exit("FAIL: %s" % s)
m32, m16 = (json.load(open(d + "/summary.json"))["mem_peak_bytes_rank0"]["activations"]
            for d in sys.argv[1:3])
print("activations: bf16 %d bytes, %.3f of fp32's" % (m16, m16 / m32))
if not m16 <= 0.55 * m32: sys.exit("FAIL: bf16 activations %.3f of fp32's" % (m16 / m32))
PY
echo PASS
