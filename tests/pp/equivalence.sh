# equivalence.sh PP DP TP SCHEDULE V MICRO_BATCH [meshtrain args for the split run...]
# Pipeline parallelism changes the layout and nothing else: tiny with 4
# layers, global batch 8, on pp x dp x tp ranks gives the loss of the
# single-rank run at every one of 10 steps (relative 1e-5), the same
# gradient norm (relative 1e-5) and validation loss; every metrics line has
# the per-stage pipeline figures.
PP=$1; DP=$2; TP=$3; SCHED=$4; V=$5; MB=$6; shift 6; EXTRA=("$@")
# (the extra arguments' hash in the name: two cases differing only there may run at once)
MT_NAME=pp_equiv; MT_SUFFIX=pp${PP}_dp${DP}_tp${TP}_${SCHED}_v${V}${EXTRA:+_$(printf '%s ' "${EXTRA[@]}" | md5sum | cut -c1-8)}
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=10
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=5
        --set train.eval_batches=1 --set train.warmup_steps=5 --set train.lr=3e-3
        --set ckpt.mode=none)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8
zero=0; [ "$DP" -gt 1 ] && zero=1
run split $((PP * DP * TP)) --set parallel.pp="$PP" --set parallel.dp="$DP" \
  --set parallel.tp="$TP" --set parallel.zero=$zero --set parallel.schedule="$SCHED" \
  --set parallel.virtual_stages="$V" --set train.micro_batch="$MB" "${EXTRA[@]}"
grep -q "mesh dp=$DP tp=$TP pp=$PP" "$WORK/split.log" || fail "run did not use pp=$PP dp=$DP tp=$TP"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/split" --rtol 1e-5 --steps 10
python3 - "$WORK/ref" "$WORK/split" "$PP" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import within
def recs(d): return [json.loads(l) for l in open(d + "/metrics.jsonl")]
ref, cur, pp = recs(sys.argv[1]), recs(sys.argv[2]), int(sys.argv[3])
for a, b in zip(ref, cur):
    for k in ("grad_norm", "val_loss"):
        if (k in a) != (k in b):
            sys.exit("FAIL: step %d: %s only in one run" % (a["step"], k))
        if k in a and not within(b[k], a[k], 1e-5):  # NaN (or null) fails
            sys.exit("FAIL: step %d %s %r vs %r" % (a["step"], k, b[k], a[k]))
    p = b["pp"]
    assert len(p["wait_s"]) == pp and len(p["bubble"]) == pp and len(p["act_peak_bytes"]) == pp, p
    assert all(x > 0 for x in p["act_peak_bytes"]), p
    assert b["pp_bytes"] > 0, "no pp bytes counted"
print("ok   grad_norm and val_loss within 1e-5; pp figures: %s" % json.dumps(cur[-1]["pp"]))
PY
