# Ring context parallelism under grouped-query attention passes the
# key/value heads compact, not their copies spread over the query heads:
# the tiny Llama (4 query heads) with 1 key/value head trains under ring cp
# = 2, and under tp = 2 x cp = 2 (the key/value head not split over tp:
# each rank spreads it over its own query heads, h0 != 0), the losses of
# its one-rank run within rtol 1e-5; its ring moves exactly 1/4 of the
# bytes of the same model with 4 key/value heads (every message holds K|V,
# or its gradient, of the key/value heads alone). The spread copies would
# give 1.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
common=(--set model.preset=tiny-llama --set model.n_layer=2 --set train.steps=4
        --set train.global_batch=4 --set train.micro_batch=2 --set data.train="$corpus"
        --set train.eval_every=0 --set train.warmup_steps=2 --set train.lr=3e-3
        --set ckpt.mode=none)
ring=(--set parallel.cp=2 --set parallel.cp_mode=ring)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run mqa 1 --set model.n_kv_head=1
run mqa_ring 2 --set model.n_kv_head=1 "${ring[@]}"
run mqa_tp2_ring 4 --set model.n_kv_head=1 "${ring[@]}" --set parallel.tp=2
run mha_ring 2 --set model.n_kv_head=4 "${ring[@]}"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/mqa" "$WORK/mqa_ring" \
  "$WORK/mqa_tp2_ring" --rtol 1e-5 --steps 4
python3 - "$WORK" <<'PY'
import json, sys
def cp_bytes(run):
    s = json.load(open("%s/%s/summary.json" % (sys.argv[1], run)))
    return [r["last_step_bytes"]["cp"] for r in s["ranks"]]
mqa, mha = cp_bytes("mqa_ring"), cp_bytes("mha_ring")
print("ring bytes per rank, last step: 1 key/value head %s, 4 %s" % (mqa, mha))
ok = all(b > 0 for b in mha) and all(a * 4 == b for a, b in zip(mqa, mha))
sys.exit(0 if ok else "FAIL: the ring's bytes with 1 key/value head are not 1/4 of 4's")
PY
echo "PASS: cp gqa ring"
