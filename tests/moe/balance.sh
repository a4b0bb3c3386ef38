# balance.sh: aux-loss-free balancing (train.moe_balance = bias). The tiny
# MoE model with 8 experts (top-2) trains 200 steps (learning rate 1e-3)
# with a bias rate of 0.001 and no load-balancing loss, on one rank and with dp = 2 x ep = 2
# (stopped and checkpointed at step 100, then resumed on one rank). The bias
# moves with the loads of the whole global batch, so:
#   - the two layouts route alike: the same expert loads, step by step,
#     over the first 40 steps (a bias from one rank's loads would differ at
#     step 2);
#   - the bias is in the checkpoint (dataset moe_router_bias), a
#     meshckpt convert keeps it, and it survives the resume: the resumed run's loads at steps
#     101-110 are the one-rank run's (a bias back at zero routes otherwise);
#   - the experts end balanced: over steps 151-200 the busiest expert's
#     share of a block's slots, summed over the 50 steps, is at most 1.15 x
#     the mean, and each step's max/mean averages at most 1.5 (without
#     balancing this model collapses onto two experts: max/mean 4, see
#     apps/scripts/bench-moe-balance.sh), in both runs.
MT_NAME=moe_balance
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set model.moe_experts=8 --set train.moe_balance=bias --set train.moe_bias_rate=0.001
      --set train.steps=200 --set train.eval_every=0 --set train.log_every=100
      --set train.lr=1e-3 --set train.warmup_steps=10)
run ref 1 --set train.micro_batch=8
run ep 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=4 \
  --set train.stop_after=100 --set ckpt.mode=shared
[ -d "$WORK/ep/checkpoints/step_100" ] || fail "no checkpoint at step 100"
# the bias is in the checkpoint, and meshckpt convert carries it along
"$MT_BIN/meshckpt" convert "$WORK/ep/checkpoints/step_100" "$WORK/conv" --mode per-writer \
  > "$WORK/conv.log" 2>&1 || { cat "$WORK/conv.log"; fail "convert failed"; }
bias() { h5dump -d moe_router_bias -y -w 0 "$1" | sed -n '/DATA {/,/}/p'; }
bias "$WORK/ep/checkpoints/step_100/ckpt.h5" > "$WORK/bias.txt"
bias "$WORK/conv/step_100/index.h5" > "$WORK/bias_conv.txt"
grep -q '[1-9]' "$WORK/bias.txt" || fail "no (or an all-zero) moe_router_bias at step 100"
cmp -s "$WORK/bias.txt" "$WORK/bias_conv.txt" || fail "convert changed moe_router_bias"
run ep 1 --set train.micro_batch=8 --set train.resume=auto
grep -q "resumed from .*step_100" "$WORK/ep.log" || fail "the run did not resume from step 100"
python3 - "$WORK/ref" "$WORK/ep" <<'PY'
import json, sys
def recs(d): return {r["step"]: r for r in map(json.loads, open(d + "/metrics.jsonl"))}
ref, ep = recs(sys.argv[1]), recs(sys.argv[2])
if sorted(ref) != list(range(1, 201)) or sorted(ep) != list(range(1, 201)):
    sys.exit("FAIL: steps 1..200 expected in both runs")
def loads(r): return r["moe"]["tokens_per_expert"]
for s in list(range(1, 41)) + list(range(101, 111)):
    if loads(ref[s]) != loads(ep[s]):
        what = "dp 2 x ep 2" if s <= 40 else "the run resumed at step 100"
        sys.exit("FAIL: step %d: expert loads %r (%s) vs %r (one rank)"
                 % (s, loads(ep[s]), what, loads(ref[s])))
for name, run in (("one rank", ref), ("dp 2 x ep 2, resumed", ep)):
    last = [run[s] for s in range(151, 201)]
    summed = [[sum(x) for x in zip(*(loads(r)[b] for r in last))] for b in range(2)]
    agg = max(max(c) / (sum(c) / len(c)) for c in summed)
    per_step = sum(max(max(c) / (sum(c) / len(c)) for c in loads(r)) for r in last) / len(last)
    if not (agg <= 1.15 and per_step <= 1.5):  # NaN fails
        sys.exit("FAIL: %s: max/mean load over steps 151-200 %.3f (bound 1.15), per step %.3f "
                 "(bound 1.5)" % (name, agg, per_step))
    if not all(r["moe"]["aux_loss"] == 0 for r in last):
        sys.exit("FAIL: %s: a load-balancing loss under train.moe_balance = bias" % name)
    print("ok   %s: max/mean load %.3f over steps 151-200, %.3f per step; loss %.4f"
          % (name, agg, per_step, run[200]["loss"]))
print("ok   the same loads on both layouts (steps 1-40) and after the resume (101-110)")
PY
echo PASS
