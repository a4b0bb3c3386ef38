# The ladder residual (model.residual = ladder) under the axes, on GPT-2 and
# on Llama: 10 steps of tiny (4 blocks) and of the tiny Llama (4 blocks,
# grouped-query attention) on one rank against tp = 2 and 4, each with and
# without sp, dp = 2 at ZeRO-3, cp = 2 (ring; Llama: Ulysses too), pp = 2
# (1f1b, interleaved, zb-v with recompute, zb-h1, and with tp = 2 + sp) and
# pp = 4; the losses within rtol 1e-5 at every step (the layouts only
# reorder sums: measured at most 5e-8). bf16 on one rank against tp = 2 +
# sp, dp = 2 at ZeRO-3 and pp = 2 within 1e-3 (bf16_layouts.sh says why
# that bound; measured 6e-5). Under train.recompute the same bits as
# without (one rank, and tp = 2 + sp). The ladder is another model: its
# curve must differ from the standard residual's on the same data and
# initialisation.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.n_layer=4 --set train.steps=10 --set train.global_batch=8
        --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=0
        --set train.warmup_steps=5 --set train.lr=3e-3 --set ckpt.mode=none)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
compare() { # RTOL RUNS...
  local rtol=$1; shift
  python3 "$MT_SRC/tests/scripts/compare_runs.py" "${@/#/$WORK/}" --rtol "$rtol" --steps 10
}
layouts() { # PREFIX ARGS...
  local p=$1; shift
  run "${p}ref" 1 "$@"
  run "${p}tp2" 2 "$@" --set parallel.tp=2
  run "${p}tp2sp" 2 "$@" --set parallel.tp=2 --set parallel.sp=true
  run "${p}tp4" 4 "$@" --set parallel.tp=4
  run "${p}tp4sp" 4 "$@" --set parallel.tp=4 --set parallel.sp=true
  run "${p}dp2z3" 2 "$@" --set parallel.dp=2 --set parallel.zero=3
  run "${p}cp2ring" 2 "$@" --set parallel.cp=2 --set parallel.cp_mode=ring
}
lad=(--set model.residual=ladder)
layouts g --set model.preset=tiny "${lad[@]}"
grep -q "ladder residual" "$WORK/gref.log" \
  || { cat "$WORK/gref.log"; fail "no word of the ladder"; }
compare 1e-5 gref gtp2 gtp2sp gtp4 gtp4sp gdp2z3 gcp2ring
layouts l --set model.preset=tiny-llama "${lad[@]}"
# pipelines: a stage passes both streams on (and both gradients back), the
# V's turn copies both; zb-h1 splits the backward into input and weight passes
run lpp2 2 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=2
run lpp4 4 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=4
run lpp2inter 2 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=2 \
  --set parallel.virtual_stages=2 --set parallel.schedule=interleaved
run lpp2zbv 2 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=2 \
  --set parallel.virtual_stages=2 --set parallel.schedule=zb-v --set train.recompute=true
run lpp2zbh1 2 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=2 \
  --set parallel.schedule=zb-h1
run lpp2tp2sp 4 --set model.preset=tiny-llama "${lad[@]}" --set parallel.pp=2 \
  --set parallel.tp=2 --set parallel.sp=true
compare 1e-5 lref lpp2 lpp4 lpp2inter lpp2zbv lpp2zbh1 lpp2tp2sp
# recompute keeps each block's MLP output (the next block reads it): the
# same bits as the run that keeps everything, at tp = 2 + sp too
run lrec 1 --set model.preset=tiny-llama "${lad[@]}" --set train.recompute=true
run ltp2sprec 2 --set model.preset=tiny-llama "${lad[@]}" --set train.recompute=true \
  --set parallel.tp=2 --set parallel.sp=true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/lref" "$WORK/lrec" --bitwise --steps 10
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ltp2sp" "$WORK/ltp2sprec" --bitwise \
  --steps 10
run lcp2uly 2 --set model.preset=tiny-llama "${lad[@]}" --set parallel.cp=2 \
  --set parallel.cp_mode=ulysses
# one sequence a micro-batch: the attention's sum over sp reduce-scattered
# without packing
run ltp4spb1 4 --set model.preset=tiny-llama "${lad[@]}" --set parallel.tp=4 \
  --set parallel.sp=true --set train.micro_batch=1
compare 1e-5 lref ltp2 ltp2sp ltp4 ltp4sp ldp2z3 lcp2ring lcp2uly ltp4spb1
# another model: the standard residual's curve differs (a key that changed
# nothing would pass the comparisons above)
run gstd 1 --set model.preset=tiny
run lstd 1 --set model.preset=tiny-llama
python3 - "$WORK" <<'PY' || fail "the ladder trained the same model as the standard residual"
import json, sys
def losses(d):
    return [json.loads(x)["loss"] for x in open(sys.argv[1] + "/" + d + "/metrics.jsonl")
            if '"loss"' in x]
for lad, std in (("gref", "gstd"), ("lref", "lstd")):
    a, b = losses(lad), losses(std)
    # the first step's loss already differs (another forward of the same weights)
    if len(a) != 10 or len(b) != 10 or not all(x != y for x, y in zip(a, b)):
        print(lad, a, std, b)
        sys.exit(1)
    print(f"{lad}: last loss {a[-1]:.6f}, standard {b[-1]:.6f}")
PY
# bf16
b16=(--set train.precision=bf16 --set model.preset=tiny-llama "${lad[@]}")
run bref 1 "${b16[@]}"
run btp2sp 2 "${b16[@]}" --set parallel.tp=2 --set parallel.sp=true
run bdp2z3 2 "${b16[@]}" --set parallel.dp=2 --set parallel.zero=3
run bpp2 2 "${b16[@]}" --set parallel.pp=2
compare 1e-3 bref btp2sp bdp2z3 bpp2
echo "PASS: ladder residual layouts"
