# metrics.trace on the CPU times every op of the op table whatever the
# storage type: a bf16 run's compute track holds every op an fp32 run's
# does (matmuls, attention, norms, the loss; and bf16's conversions), not
# only the optimizer's few fp32 ops.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
for p in fp32 bf16; do
  mt_train "$p" 1 --set model.preset=tiny --set data.train="$corpus" --set train.global_batch=8 \
    --set train.micro_batch=2 --set train.steps=2 --set train.eval_every=0 --set ckpt.mode=none \
    --set train.precision=$p --set metrics.trace=true --set output.dir="$WORK/$p"
done
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def ops(p):
    ev = json.load(open("%s/%s/trace/rank0.json" % (w, p)))["traceEvents"]
    return {e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "op"}
f32, b16 = ops("fp32"), ops("bf16")
need = {"matmul_forward", "matmul_backward_first", "attn_forward", "attn_backward_first",
        "layernorm_forward"}
if not need <= f32:
    sys.exit("FAIL: the fp32 trace lacks %s" % sorted(need - f32))
if not f32 <= b16:
    sys.exit("FAIL: the bf16 trace lacks the ops %s of the fp32 one" % sorted(f32 - b16))
print("ok   bf16 traces %d ops (fp32 %d): %s" % (len(b16), len(f32), " ".join(sorted(b16))))
PY
echo PASS
