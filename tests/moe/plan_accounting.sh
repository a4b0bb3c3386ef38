# The plan equals what a MoE run counts, exactly: for the tiny MoE model
# with k = E (every token to every expert, so the all-to-all volume is what
# a balanced routing gives), on folded layouts of 2 and 4 ranks at ZeRO 0-3,
# `meshtrain --plan-json` predicts every rank's bytes by category
# (parameters, gradients, optimizer state, gathered parameters,
# activations with the dispatch's buffers, comm buffers) and the bytes it
# sends per step over dp, tp, pp, ep, etp and edp; the run's allocator and
# comm counters (summary.json ranks[]) must equal them. Also with capacity
# (the buffers sized by it), shared experts, and least-loaded expert
# parallelism (its buffers; a balanced routing moves no rows). Prints the
# plan of one case. And under train.precision = bf16 (bf16 rows over ep and
# etp, the bf16 weights' copy, the fp32 router's widened buffers), at ZeRO-1
# and 3, tp x etp with shared experts, tp x dp x sp, pp zb-h1 + recompute.
MT_NAME=moe_plan
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=2 --set train.eval_every=0 --set model.moe_topk=4)
cases=("dp2ep2z0 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=0 --set train.micro_batch=2"
       "dp2ep2z1 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2"
       "dp4ep2z2 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=2 --set train.micro_batch=1"
       "dp4ep2z3 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2"
       "tp2etp2 2 --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=4 --set model.moe_shared=1"
       "tp2ep2 2 --set parallel.tp=2 --set parallel.ep=2 --set train.micro_batch=4 --set model.moe_capacity=1.5"
       "tp2dp2sp 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.sp=true --set parallel.etp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2"
       "pp2dp2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=1"
       "dp2ep2llep 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2 --set parallel.ep_balance=least-loaded"
       "dp2ep2z1bf 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2 --set train.precision=bf16"
       "dp4ep2z3bf 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2 --set train.precision=bf16"
       "tp2etp2bf 2 --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=4 --set model.moe_shared=1 --set train.precision=bf16"
       "tp2dp2spbf 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.sp=true --set parallel.etp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2 --set train.precision=bf16"
       "pp2dp2bf 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=1 --set parallel.schedule=zb-h1 --set train.recompute=true --set train.precision=bf16")
for c in "${cases[@]}"; do mt_plan_and_train "$c" "${MOE[@]}"; done
cat "$WORK/tp2dp2sp.plan.txt"
python3 - "$MT_SRC/tests/scripts" "$WORK" "${cases[@]}" <<'PY' || fail "plan and run differ"
import sys
sys.path.insert(0, sys.argv[1])
from plan_vs_run import compare
work, bad = sys.argv[2], 0
for case in (c.split()[0] for c in sys.argv[3:]):
    n, p0 = compare(work, case, ["dp", "tp", "pp", "ep", "etp", "edp"])
    bad += n
    if not p0["step_bytes"]["ep"] + p0["step_bytes"]["etp"] > 0:
        print("FAIL: %s: no expert traffic planned" % case)
        bad += 1
sys.exit(1 if bad else 0)
PY
echo PASS
