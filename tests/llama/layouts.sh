# The Llama architecture (RMSNorm, rotary positions, SwiGLU, grouped-query
# attention, untied LM head, no biases) under every axis: 10 steps of the
# tiny Llama (4 blocks, 4 query heads) on one rank against dp = 2 at ZeRO-3,
# tp = 2 with sp (2 key/value heads: split over tp), tp = 4 (2 key/value
# heads: every rank holds both and uses its query heads' one), cp = 2 ring
# (rotary positions by the zigzag chunks' global indices) and Ulysses,
# pp = 2 interleaved and zb-v with recompute; and multi-query attention (1
# key/value head) on one rank against tp = 2 with sp and tp = 4. fp32: the
# losses within rtol 1e-5 at every step (the layouts only reorder sums:
# measured at most 3e-7); then bf16 against its own one-rank run within rtol
# 1e-3 (bf16_layouts.sh says why that bound).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny-llama --set model.n_layer=4 --set train.steps=10
        --set train.global_batch=8 --set train.micro_batch=2 --set data.train="$corpus"
        --set train.eval_every=0 --set train.warmup_steps=5 --set train.lr=3e-3)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
pp=(--set parallel.pp=2 --set parallel.virtual_stages=2)
layouts() { # PREFIX ARGS...: the GQA layouts
  local p=$1; shift
  run "${p}ref" 1 "$@"
  run "${p}dp2z3" 2 "$@" --set parallel.dp=2 --set parallel.zero=3
  run "${p}tp2sp" 2 "$@" --set parallel.tp=2 --set parallel.sp=true
  run "${p}tp4" 4 "$@" --set parallel.tp=4
  run "${p}cp2ring" 2 "$@" --set parallel.cp=2 --set parallel.cp_mode=ring
  run "${p}cp2uly" 2 "$@" --set parallel.cp=2 --set parallel.cp_mode=ulysses
  run "${p}pp2inter" 2 "$@" "${pp[@]}" --set parallel.schedule=interleaved
  run "${p}pp2zbv" 2 "$@" "${pp[@]}" --set parallel.schedule=zb-v --set train.recompute=true
}
layouts ""
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/dp2z3" "$WORK/tp2sp" \
  "$WORK/tp4" "$WORK/cp2ring" "$WORK/cp2uly" "$WORK/pp2inter" "$WORK/pp2zbv" --rtol 1e-5 --steps 10
# multi-query attention
run mqaref 1 --set model.n_kv_head=1
run mqatp2sp 2 --set model.n_kv_head=1 --set parallel.tp=2 --set parallel.sp=true
run mqatp4 4 --set model.n_kv_head=1 --set parallel.tp=4
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/mqaref" "$WORK/mqatp2sp" "$WORK/mqatp4" \
  --rtol 1e-5 --steps 10
# the models differ: the curves must too (a key that changed nothing would pass above)
python3 - "$WORK/ref" "$WORK/mqaref" <<'PY' || fail "n_kv_head = 1 trained the same model as 2"
import json, sys
l = [[json.loads(x)["loss"] for x in open(d + "/metrics.jsonl") if '"loss"' in x] for d in sys.argv[1:]]
sys.exit(0 if l[0][-1] != l[1][-1] else 1)
PY
# bf16
layouts b16 --set train.precision=bf16
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/b16ref" "$WORK/b16dp2z3" "$WORK/b16tp2sp" \
  "$WORK/b16tp4" "$WORK/b16cp2ring" "$WORK/b16cp2uly" "$WORK/b16pp2inter" "$WORK/b16pp2zbv" \
  --rtol 1e-3 --steps 10
echo "PASS: llama layouts"
