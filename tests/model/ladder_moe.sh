# The ladder residual with Mixture-of-Experts blocks (the pending output of
# a MoE block is its shared experts' plus its routed experts'): the tiny
# Llama with 4 experts, top-2, every second block MoE (dense and MoE blocks
# alternate) with a shared expert, 10 steps on one rank against dp = 2 x
# ep = 2 at ZeRO-3, tp = 2 + sp with etp = 2, tp = 2 x ep = 2, and pp = 2
# interleaved x dp = 2 x ep = 2; the
# losses within rtol 1e-5 at every step; tp = 2 x ep = 2 under recompute
# with the bits of the run without.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/../llama/common_moe.sh"
common=("${moe_common[@]}" --set model.moe_every=2 --set model.moe_shared=1
        --set model.residual=ladder --set train.steps=10 --set ckpt.mode=none)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8
run dp2ep2z3 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 \
  --set train.micro_batch=4
run tp2sp_etp2 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 \
  --set train.micro_batch=4
run tp2ep2 2 --set parallel.tp=2 --set parallel.ep=2 --set train.micro_batch=8
run pp2dp2ep2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=1
run tp2ep2rec 2 --set parallel.tp=2 --set parallel.ep=2 --set train.micro_batch=8 \
  --set train.recompute=true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/dp2ep2z3" "$WORK/tp2sp_etp2" \
  "$WORK/tp2ep2" "$WORK/pp2dp2ep2" --rtol 1e-5 --steps 10
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/tp2ep2" "$WORK/tp2ep2rec" --bitwise \
  --steps 10
echo "PASS: ladder residual with MoE blocks"
