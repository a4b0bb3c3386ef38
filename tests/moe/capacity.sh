# Capacity mode: with model.moe_capacity = 1.0 an expert takes at most
# ceil(1.0 x 32 x 2 / 4) = 16 slots of each 32-token sequence, so the busier
# experts drop slots. The drops are decided per sequence (first choices,
# then position), so every layout drops the same slots: over 10 steps the
# slots per expert and dropped per MoE block are equal to the one-rank run's
# at every step (routing to the bit), some are dropped, and the losses stay
# within 1e-5. A dropless run of the same model drops none.
MT_NAME=moe_capacity
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=10 --set train.eval_every=0 --set model.moe_capacity=1.0)
run ref 1 --set train.micro_batch=8
run dp2ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2
run tp2sp 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.ep=2 --set train.micro_batch=4
run tp2dp2 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.etp=2 --set parallel.ep=2 \
  --set train.micro_batch=1
run dropless 1 --set train.micro_batch=8 --set model.moe_capacity=0
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/dp2ep2" "$WORK/tp2sp" \
  "$WORK/tp2dp2" --rtol 1e-5 --steps 10
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def recs(d): return [json.loads(l)["moe"] for l in open("%s/%s/metrics.jsonl" % (w, d))]
ref = recs("ref")
dropped = sum(sum(m["dropped_frac"]) for m in ref)
if not dropped > 0:
    sys.exit("FAIL: capacity 1.0 dropped nothing (dropped_frac %r)" % [m["dropped_frac"] for m in ref])
for d in ("dp2ep2", "tp2sp", "tp2dp2"):
    for step, (a, b) in enumerate(zip(ref, recs(d)), 1):
        if a["tokens_per_expert"] != b["tokens_per_expert"] or a["dropped_frac"] != b["dropped_frac"]:
            sys.exit("FAIL: %s step %d: routed %r dropped %r, one rank routed %r dropped %r"
                     % (d, step, b["tokens_per_expert"], b["dropped_frac"],
                        a["tokens_per_expert"], a["dropped_frac"]))
if any(sum(m["dropped_frac"]) for m in recs("dropless")):
    sys.exit("FAIL: the dropless run dropped slots")
print("ok   every layout drops the same slots (%.1f%% of step 1's, over the blocks); dropless none"
      % (100 * sum(ref[0]["dropped_frac"]) / len(ref[0]["dropped_frac"])))
PY
echo PASS
