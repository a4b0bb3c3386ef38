# equivalence.sh DP TP SP MICRO_BATCH
# Tensor (and sequence) parallelism changes the layout and nothing else: the
# same global batch (8 sequences of tiny) on dp x tp ranks gives the loss of
# the dp=1, tp=1 run at every one of 20 steps (relative 1e-5), and the same
# gradient norm (so clipping acts the same; relative 1e-5) and validation
# loss. ZeRO-1 when dp > 1; MICRO_BATCH < 8/dp adds gradient accumulation.
DP=$1; TP=$2; SP=$3; MB=$4
MT_NAME=tp_equiv; MT_SUFFIX=dp${DP}_tp${TP}_sp${SP}
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=10 --set train.eval_batches=1
        --set train.warmup_steps=5 --set train.lr=3e-3)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8
zero=0; [ "$DP" -gt 1 ] && zero=1
sp=false; [ "$SP" = 1 ] && sp=true
run split $((DP * TP)) --set parallel.dp="$DP" --set parallel.tp="$TP" --set parallel.sp=$sp \
  --set parallel.zero=$zero --set train.micro_batch="$MB"
grep -q "mesh dp=$DP tp=$TP" "$WORK/split.log" || fail "run did not use dp=$DP tp=$TP"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/split" --rtol 1e-5 --steps 20
python3 - "$WORK/ref" "$WORK/split" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import rel_err, worst as worse
def recs(d): return [json.loads(l) for l in open(d + "/metrics.jsonl")]
ref, cur = recs(sys.argv[1]), recs(sys.argv[2])
worst = {"grad_norm": 0.0, "val_loss": 0.0}
for a, b in zip(ref, cur):
    for k in worst:
        if (k in a) != (k in b):
            sys.exit("FAIL: step %d: %s only in one run" % (a["step"], k))
        if k in a:
            rel = rel_err(b[k], a[k])  # NaN for a NaN or null
            worst[k] = worse(worst[k], rel)
            if not rel <= 1e-5:  # NaN fails
                sys.exit("FAIL: step %d %s %r vs %r (rel %.3g)" % (a["step"], k, b[k], a[k], rel))
assert sum("val_loss" in r for r in cur) == 2, "expected 2 validation losses"
assert all(r["tp_bytes"] > 0 for r in cur), "no tp bytes counted"
print("ok   grad_norm max rel %.3g, val_loss max rel %.3g" % (worst["grad_norm"], worst["val_loss"]))
PY
