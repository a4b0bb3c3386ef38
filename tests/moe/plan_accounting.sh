# The plan equals what a MoE run counts, exactly: for the tiny MoE model
# with k = E (every token to every expert, so the all-to-all volume is what
# a balanced routing gives), on folded layouts of 2 and 4 ranks at ZeRO 0-3,
# `meshtrain --plan-json` predicts every rank's bytes by category
# (parameters, gradients, optimizer state, gathered parameters,
# activations with the dispatch's buffers, comm buffers) and the bytes it
# sends per step over dp, tp, pp, ep, etp and edp; the run's allocator and
# comm counters (summary.json ranks[]) must equal them. Also with capacity
# (the buffers sized by it) and shared experts. Prints the plan of one case.
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
       "pp2dp2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=1")
for c in "${cases[@]}"; do
  read -r name np args <<< "$c"
  # shellcheck disable=SC2086
  "$MT_BIN/meshtrain" "${MOE[@]}" $args --set output.dir="$WORK/$name" \
    --plan-json "$WORK/$name.plan.json" > "$WORK/$name.plan.txt" || fail "plan $name"
  # shellcheck disable=SC2086
  run "$name" "$np" $args
done
cat "$WORK/tp2dp2sp.plan.txt"
python3 - "$WORK" "${cases[@]}" <<'PY'
import json, sys
work, cases = sys.argv[1], [c.split()[0] for c in sys.argv[2:]]
cats = ["params", "grads", "optimizer", "gathered", "activations", "comm"]
groups = ["dp", "tp", "pp", "ep", "etp", "edp"]
bad = 0
for name in cases:
    plan = json.load(open("%s/%s.plan.json" % (work, name)))
    run = json.load(open("%s/%s/summary.json" % (work, name)))
    ranks = {r["rank"]: r for r in run["ranks"]}
    if len(ranks) != len(plan["ranks"]):
        sys.exit("FAIL: %s: %d ranks ran, the plan has %d" % (name, len(ranks), len(plan["ranks"])))
    for p in plan["ranks"]:
        r = ranks[p["rank"]]
        for c in cats:
            if c == "comm" and not p["comm_exact"]:
                continue
            got, want = r["mem_peak_bytes"][c], p["mem_bytes"][c]
            if not got == want:
                print("FAIL: %s rank %d %s: allocated %r bytes, planned %r" % (name, p["rank"], c, got, want))
                bad += 1
        for g in groups:
            got, want = r["last_step_bytes"][g], p["step_bytes"][g]
            if not got == want:
                print("FAIL: %s rank %d: %s bytes per step %r, planned %r" % (name, p["rank"], g, got, want))
                bad += 1
    p0 = plan["ranks"][0]
    if not p0["step_bytes"]["ep"] + p0["step_bytes"]["etp"] > 0:
        print("FAIL: %s: no expert traffic planned" % name)
        bad += 1
    print("%-9s rank 0: " % name + " ".join("%s %d" % (c, p0["mem_bytes"][c]) for c in cats) +
          " | per step " + " ".join("%s %d" % (g, p0["step_bytes"][g]) for g in groups))
sys.exit(1 if bad else 0)
PY
echo PASS
