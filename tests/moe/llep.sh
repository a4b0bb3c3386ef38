# Least-loaded expert parallelism (parallel.ep_balance = least-loaded) is
# exact and balances. A forced skew: 8 experts top-2, the routing bias of
# expert 0 starts at 0.5 and stays (moe_balance = bias, rate 0), so every
# token's first choice is expert 0 and its ep rank holds most of the rows.
# On one rank, then with LLEP at dp2 x ep2, dp4 x ep4 ZeRO-3, pp2 x dp2 x
# ep2 zb-h1 (the experts' weight pass returns the helpers' gradients) and
# dp2 x ep2 recompute at alpha 1, with a minimum piece no plan reaches
# (nothing moves), and without it at dp2 x ep2: losses,
# gradient norms and validation losses within 1e-5 of one rank over 20
# steps (NaN fails); LLEP moved rows in every LLEP run and kept the busiest
# rank's rows within alpha x the mean (+ a row per micro-batch of rounding),
# where without it the busiest rank holds more than 1.15 x the mean on
# average; the first LLEP layout twice gives the same bits; its ep bytes
# lie between the plan's balanced figure and the plan's worst case.
# Under train.precision = bf16 at dp2 x ep2: LLEP against the same layout
# without it within rtol 1e-3 over 20 steps (the helpers multiply the same
# bf16 weights' copy, so the forward is exact; the helpers' fp32 weight
# gradients reach the owner as a separate sum, so the fp32 master differs by
# summation order and its bf16 copy may round the other way now and then),
# rows moved, and the ep bytes within the plan's bf16 bounds: the lent
# weights travel in bf16, the returned gradients in fp32.
MT_NAME=moe_llep
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=20 --set train.eval_every=10 --set train.eval_batches=1
      --set model.moe_experts=8 --set train.moe_balance=bias --set train.moe_bias_rate=0
      --set train.moe_bias_init=0.5)
LL=(--set parallel.ep_balance=least-loaded)
run ref 1 --set train.micro_batch=8
run ref4 1 --set train.micro_batch=8 --set model.n_layer=4
run off 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2
run dp2ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 "${LL[@]}"
run dp2ep2_again 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 "${LL[@]}"
run dp4ep4z3 4 --set parallel.dp=4 --set parallel.ep=4 --set parallel.zero=3 \
  --set train.micro_batch=1 "${LL[@]}"
run pp2zbh1 4 --set model.n_layer=4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 \
  --set parallel.schedule=zb-h1 --set train.micro_batch=1 "${LL[@]}"
run minrows 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set parallel.ep_balance_min_rows=100000 "${LL[@]}"
run recompute 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set train.recompute=true --set parallel.ep_balance_alpha=1 "${LL[@]}"
run bf16off 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set train.precision=bf16
run bf16ll 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set train.precision=bf16 "${LL[@]}"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/dp2ep2" "$WORK/dp2ep2_again" --bitwise
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/bf16off" "$WORK/bf16ll" --rtol 1e-3 \
  --steps 20 || fail "bf16: least-loaded against the same layout without it"
# the plan's worst case bounds what the skewed run sends: rank 0's ep bytes
# in every step without evaluation lie above the plan's balanced figure (the
# weights moved) and within its worst case
"$MT_BIN/meshtrain" "${MOE[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  "${LL[@]}" --set output.dir="$WORK/plan" --plan-json "$WORK/dp2ep2.plan.json" \
  > "$WORK/plan.txt" || fail "plan dp2ep2"
"$MT_BIN/meshtrain" "${MOE[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  "${LL[@]}" --set train.precision=bf16 --set output.dir="$WORK/plan16" \
  --plan-json "$WORK/bf16ll.plan.json" > "$WORK/plan16.txt" || fail "plan bf16ll"
grep -q "^# ep, least-loaded (alpha 1.1): at most .* GB more per step" "$WORK/plan.txt" \
  || { cat "$WORK/plan.txt"; fail "the plan states no least-loaded worst case"; }
python3 - "$WORK" <<'PY' || fail "the plan's least-loaded worst case"
import json, sys
work = sys.argv[1]
for run in ("dp2ep2", "bf16ll"):
    plan = json.load(open("%s/%s.plan.json" % (work, run)))
    b = next(r for r in plan["ranks"] if r["rank"] == 0)["step_bytes"]
    steps = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, run))]
    got = [r["moe"]["ep_bytes"] for r in steps if "val_loss" not in r]
    if not got or not all(b["ep"] < x <= b["ep_worst"] for x in got):
        sys.exit("FAIL: %s: ep bytes per step %s, plan balanced %d, worst %d"
                 % (run, got, b["ep"], b["ep_worst"]))
    if run == "bf16ll" and not sum(sum(r["moe"]["moved_frac"]) for r in steps) > 0:
        sys.exit("FAIL: bf16ll: least-loaded moved no rows")
    print("ok   %-7s ep bytes per step %d..%d: above the balanced plan's %d, within its worst "
          "case %d" % (run, min(got), max(got), b["ep"], b["ep_worst"]))
PY
python3 - "$WORK" <<'PY'
import json, math, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import within
work = sys.argv[1]
off_busy = []
def recs(d): return [json.loads(l) for l in open(os.path.join(work, d, "metrics.jsonl"))]
# name: (reference, alpha, ranks holding a block's experts, LLEP on)
runs = {"off": ("ref", 1.1, 2, False), "dp2ep2": ("ref", 1.1, 2, True),
        "dp4ep4z3": ("ref", 1.1, 4, True), "pp2zbh1": ("ref4", 1.1, 2, True),
        "recompute": ("ref", 1.0, 2, True), "minrows": ("ref", 1.1, 2, None)}
for name, (refname, alpha, ranks, on) in runs.items():
    ref, got = recs(refname), recs(name)
    if len(ref) != 20 or len(got) != 20:
        sys.exit("FAIL: %s: %d and %d steps, not 20" % (name, len(ref), len(got)))
    worst = 0.0
    for a, b in zip(ref, got):
        for k in ("loss", "grad_norm", "val_loss"):
            if (k in a) != (k in b):
                sys.exit("FAIL: %s step %d: %s only in one run" % (name, a["step"], k))
            if k in a and not within(b[k], a[k], 1e-5):  # NaN or null fails
                sys.exit("FAIL: %s step %d %s %r vs one rank %r" % (name, a["step"], k, b[k], a[k]))
            if k in a:
                worst = max(worst, abs(b[k] - a[k]) / abs(a[k]))
        m = b["moe"]
        # the busiest rank's rows over the mean, per block of the step
        for blk, (busy, moved) in enumerate(zip(m["rows_max_over_mean"], m["moved_frac"])):
            tokens = sum(m["tokens_per_expert"][blk])
            # per micro-batch ceil(alpha x mean): a row of rounding each (at most 4)
            bound = (math.ceil(alpha * tokens / ranks) + 4) / (tokens / ranks)
            if on and not busy <= bound:
                sys.exit("FAIL: %s step %d block %d: busiest rank %.4f x the mean, bound %.4f"
                         % (name, b["step"], blk, busy, bound))
            if not on and moved != 0:  # off, or every piece below the minimum
                sys.exit("FAIL: %s step %d block %d: rows moved" % (name, b["step"], blk))
            if on is False:
                off_busy.append(busy)
        if on and not sum(m["moved_frac"]) > 0:
            sys.exit("FAIL: %s step %d: LLEP moved no rows under the skew" % (name, b["step"]))
    last = got[-1]["moe"]
    print("ok   %-10s within %.1e of one rank; last step busiest/mean %s, moved %s"
          % (name, worst, ["%.3f" % x for x in last["rows_max_over_mean"]],
             ["%.3f" % x for x in last["moved_frac"]]))
mean = sum(off_busy) / len(off_busy)
if not mean > 1.15:  # the skew is real: without LLEP the busiest rank holds more than alpha
    sys.exit("FAIL: without LLEP the busiest rank holds %.3f x the mean on average" % mean)
print("ok   without LLEP the busiest rank holds %.3f x the mean on average" % mean)
PY
echo PASS
