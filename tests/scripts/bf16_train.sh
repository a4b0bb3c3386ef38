# train.precision = bf16 on the CPU (bf16 weights' copy and activations over
# the fp32 master and moments) trains as fp32 does:
#  - tiny, 200 steps, one rank: the final loss within 1% of fp32's (the
#    issue's bound; measured 2.8210 vs 2.8212, 8e-5, and at most 5.2e-4 at
#    any step), and its first 40 steps bitwise the same when run again;
#  - what it holds: activations about half of fp32's (bf16 except the
#    LayerNorm statistics, the LSE and the losses), parameters 1.5x (the
#    fp32 master and the bf16 copy), gradients and moments as fp32.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=200 --set train.global_batch=8
        --set train.micro_batch=4 --set data.train="$corpus" --set train.eval_every=0)
# run NAME ARGS...
run() { mt_train "$1" 1 "${common[@]}" --set output.dir="$WORK/$1" "${@:2}"; }
run fp32 --set train.precision=fp32
run bf16 --set train.precision=bf16
run bf16_again --set train.precision=bf16 --set train.stop_after=40
grep -q "precision bf16 on the CPU" "$WORK/bf16.log" || fail "no line saying how the CPU computes in bf16"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/bf16" "$WORK/bf16_again" --bitwise --subset \
  --steps 200
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def last(run):
    recs = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, run))]
    return float("nan") if recs[-1]["loss"] is None else recs[-1]["loss"], len(recs)
(l32, n32), (l16, n16) = last("fp32"), last("bf16")
rel = abs(l16 - l32) / l32
print("tiny, 200 steps: final loss fp32 %.5f, bf16 %.5f, relative difference %.2e" % (l32, l16, rel))
bad = 0
if not (n32 == 200 and n16 == 200 and rel <= 0.01):
    print("FAIL: bf16's final loss is not within 1%% of fp32's (%d, %d steps)" % (n32, n16))
    bad += 1
mem = {r: json.load(open("%s/%s/summary.json" % (work, r)))["mem_peak_bytes_rank0"]
       for r in ("fp32", "bf16")}
for cat, lo, hi in (("activations", 0.45, 0.55), ("params", 1.5, 1.5), ("grads", 1.0, 1.0),
                    ("optimizer", 1.0, 1.0)):
    ratio = mem["bf16"][cat] / mem["fp32"][cat]
    print("  %-11s bf16 %9d bytes, fp32 %9d: %.3f" % (cat, mem["bf16"][cat], mem["fp32"][cat], ratio))
    if not lo <= ratio <= hi:
        print("FAIL: %s bf16/fp32 = %.3f, expected in [%.2f, %.2f]" % (cat, ratio, lo, hi))
        bad += 1
sys.exit(1 if bad else 0)
PY
echo PASS
