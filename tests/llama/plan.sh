# The plan equals what a Llama run counts, exactly: `meshtrain --plan-json`
# predicts every rank's bytes by category (parameters, gradients, optimizer
# state, gathered parameters, activations with the grouped-query scratch
# and the rotary table, comm buffers) and the bytes it sends per step over
# dp, tp, pp and cp; the run's allocator and comm counters (summary.json
# ranks[]) must equal them. Layouts: dp 2 at ZeRO-3, tp 2 with sp (key and
# value heads split), tp 4 (all on every rank, partial gradients summed over
# tp), ring cp 2, pp 2 zb-v with recompute, and bf16 at tp 2 x dp 2.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny-llama --set model.n_layer=4 --set train.steps=2
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=0
        --set ckpt.mode=none)
cases=("dp2z3 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2"
       "tp2sp 2 --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4"
       "tp4 4 --set parallel.tp=4 --set train.micro_batch=4"
       "cp2 2 --set parallel.cp=2 --set train.micro_batch=4"
       "pp2zbv 2 --set parallel.pp=2 --set parallel.schedule=zb-v --set parallel.virtual_stages=2 --set train.recompute=true --set train.micro_batch=2"
       "tp2dp2bf 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 --set train.precision=bf16")
for c in "${cases[@]}"; do mt_plan_and_train "$c" "${common[@]}"; done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,cp "${cases[@]}" \
  || fail "plan and run differ"
# Llama MoE (SwiGLU experts, gate|up fused; a SwiGLU shared expert; k = E so
# the all-to-all volume is a balanced routing's): the dispatch's buffers,
# the experts' 2 Fe hidden rows and their lent weights (least-loaded)
moe=(--set model.moe_experts=4 --set model.moe_topk=4 --set model.moe_ffn=64)
mcases=("mdp2ep2z3 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2"
        "mtp2etp2sh 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 --set model.moe_shared=1 --set train.micro_batch=4"
        "mdp2ep2ll 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.ep_balance=least-loaded --set model.moe_router=sigmoid --set train.moe_balance=bias --set train.micro_batch=2"
        "mpp2bf 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set parallel.schedule=zb-h1 --set train.recompute=true --set train.precision=bf16 --set train.micro_batch=1")
for c in "${mcases[@]}"; do mt_plan_and_train "$c" "${common[@]}" "${moe[@]}"; done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,ep,etp,edp "${mcases[@]}" \
  || fail "plan and run differ (Llama MoE)"
echo "PASS: the plan of a Llama run is what it counts"
