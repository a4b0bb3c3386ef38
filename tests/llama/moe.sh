# Mixture-of-Experts on the Llama architecture (Mixtral's and DeepSeek's
# shape: SwiGLU experts whose gate and up rows are one fused (E, 2 Fe, C)
# tensor split over etp as two blocks, SwiGLU shared experts, no biases):
# the tiny Llama with 4 experts, top-2, dropless, grouped-query attention
# (2 key/value heads), 10 steps on one rank, then on dp = 2 x ep = 2 at
# ZeRO-3, tp = 2 + sp with etp = 2 and a shared expert, tp = 2 with ep = 2,
# cp = 2 ring x ep = 2, cp = 2 Ulysses, pp = 2 uneven (1 block, then 3),
# pp = 2 interleaved x dp = 2 x ep = 2
# and pp = 2 zb-h1 (the experts' GEMMs split into input and weight passes)
# with recompute and least-loaded expert placement (experts' weights lent
# between ep ranks); the losses and gradient norms within rtol 1e-5 of the
# one-rank run at every step. Then bf16 on three of them within 1e-3, and
# the model with n_kv_head = 1 and a sigmoid router must train differently
# (a key that changed nothing would pass the rest).
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/common_moe.sh"
common=("${moe_common[@]}" --set train.moe_z_coef=0.001 --set train.steps=10 --set ckpt.mode=none)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
compare() { # RTOL REF RUNS...
  local rtol=$1; shift
  python3 "$MT_SRC/tests/scripts/compare_runs.py" "${@/#/$WORK/}" --rtol "$rtol" --steps 10
}
sh=(--set model.moe_shared=1)
run ref 1 --set train.micro_batch=8
run shref 1 "${sh[@]}" --set train.micro_batch=8
run dp2ep2z3 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=4
run tp2sp_etp2 2 "${sh[@]}" --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 \
  --set train.micro_batch=4
run tp2ep2 2 --set parallel.tp=2 --set parallel.ep=2 --set train.micro_batch=8
run cp2ring_ep2 2 --set parallel.cp=2 --set parallel.ep=2 --set train.micro_batch=8
run cp2uly 2 "${sh[@]}" --set parallel.cp=2 --set parallel.cp_mode=ulysses --set train.micro_batch=8
run pp2uneven 2 --set parallel.pp=2 --set parallel.pp_first_layers=1 --set train.micro_batch=2
run pp2dp2ep2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=1
# least-loaded placement on a skewed router (expert 0's bias +0.5): the
# experts' weights lent to other ep ranks and their gradients sent back
skew=(--set train.moe_balance=bias --set train.moe_bias_rate=0 --set train.moe_bias_init=0.5)
run skref 1 "${skew[@]}" --set train.micro_batch=8
run pp2zbh1_llep 4 "${skew[@]}" --set parallel.pp=2 --set parallel.ep=2 --set parallel.dp=2 \
  --set parallel.schedule=zb-h1 --set train.recompute=true --set train.micro_batch=2 \
  --set parallel.ep_balance=least-loaded
python3 - "$WORK/pp2zbh1_llep/metrics.jsonl" <<'PY' || fail "least-loaded moved no rows under the skew"
import json, sys
recs = [json.loads(x) for x in open(sys.argv[1]) if '"moe"' in x]
sys.exit(0 if recs and sum(sum(r["moe"]["moved_frac"]) for r in recs) > 0 else 1)
PY
compare 1e-5 ref dp2ep2z3 tp2ep2 cp2ring_ep2 pp2uneven pp2dp2ep2
compare 1e-5 shref tp2sp_etp2 cp2uly
compare 1e-5 skref pp2zbh1_llep
# DeepSeek-V3's routing: sigmoid scores, aux-loss-free balancing by a
# per-expert bias (updated from the step's loads), a shared expert
ds=(--set model.moe_router=sigmoid --set train.moe_balance=bias --set train.moe_bias_rate=0.01
    --set train.moe_z_coef=0 --set model.moe_shared=1)
run dsref 1 "${ds[@]}" --set train.micro_batch=8
run dsdp2ep2 2 "${ds[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=4
run dstp2sp_etp2 2 "${ds[@]}" --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 \
  --set train.micro_batch=4
compare 1e-5 dsref dsdp2ep2 dstp2sp_etp2
# bf16 (bf16 weight gradients and rows; fp32 router)
b16=(--set train.precision=bf16)
run b16ref 1 "${sh[@]}" "${b16[@]}" --set train.micro_batch=8
run b16tp2sp_etp2 2 "${sh[@]}" "${b16[@]}" --set parallel.tp=2 --set parallel.sp=true \
  --set parallel.etp=2 --set train.micro_batch=4
run b16dp2ep2 2 "${sh[@]}" "${b16[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=4
compare 1e-3 b16ref b16tp2sp_etp2 b16dp2ep2
# the models differ: the curves must too
run mqa 1 --set model.n_kv_head=1 --set train.micro_batch=8
python3 - "$WORK/ref" "$WORK/shref" "$WORK/mqa" "$WORK/dsref" <<'PY' || fail "a key changed nothing"
import json, sys
last = [[json.loads(x)["loss"] for x in open(d + "/metrics.jsonl") if '"loss"' in x][-1] for d in sys.argv[1:]]
sys.exit(0 if len(set(last)) == len(last) else 1)
PY
echo "PASS: llama MoE layouts"
