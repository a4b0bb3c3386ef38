# virtual.moe_skew: the virtual device's synthetic routing with a Zipf load
# (MoE, 8 experts top-2, ep 4 on dp 8). Skew 0 is balanced: every expert
# of every block gets the same tokens. Skew 1 and 2: every token still
# routed k times (the counts sum to the same total), the loads fall with the
# expert's index, the busiest expert's share over the mean grows with the
# skew (Zipf's law over 8 experts gives expert 0 8/H_8 = 2.94 times the
# mean at skew 1; at skew 2 it takes every token: 4 = 8/2 with k = 2), the
# all-to-all carries more bytes (the hot experts' ep rank receives more),
# and the virtual step is slower. The same skewed run twice: the same loads
# and virtual times. Bad input: a skew on a real device, on a dense model.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
args=(--set model.preset=tiny --set data.train="$corpus" --set train.global_batch=32 --set train.micro_batch=2
      --set model.moe_experts=8 --set model.moe_topk=2 --set parallel.ep=4 --set parallel.dp=8
      --set train.steps=3 --set train.eval_every=0 --set ckpt.mode=none --set train.device=virtual
      --set train.virtual_hw=h200)
for run in s0:0 s1:1 s2:2 s2b:2; do
  name=${run%%:*} skew=${run#*:}
  mt_mpirun 8 "$MT_BIN/meshtrain" "${args[@]}" --set virtual.moe_skew="$skew" --set output.dir="$WORK/$name" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "virtual run, skew $skew"; }
done
python3 - "$WORK" <<'PY' || fail "the skewed loads"
import json, math, sys
work = sys.argv[1]
last = {n: [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, n))][-1] for n in ("s0", "s1", "s2", "s2b")}
total = None
for n, want in (("s0", 1.0), ("s1", 8 / sum(1 / (e + 1) for e in range(8))), ("s2", 4.0)):
    moe = last[n]["moe"]
    for b, tok in enumerate(moe["tokens_per_expert"]):
        total = total or sum(tok)
        assert sum(tok) == total, (n, b, tok, total)
        assert all(x >= y for x, y in zip(tok, tok[1:])), (n, b, tok)
        got = max(tok) / (total / len(tok))
        assert math.isclose(moe["load_max_over_mean"][b], got, rel_tol=1e-6), (n, moe["load_max_over_mean"])
        assert abs(got - want) <= 0.05 * want, "%s block %d: busiest/mean %.3f, Zipf gives %.3f" % (n, b, got, want)
    print("skew %s: tokens per expert %s, busiest/mean %.3f, ep bytes %d, step %.3g s" % (
        n[1:], moe["tokens_per_expert"][0], moe["load_max_over_mean"][0], moe["ep_bytes"], last[n]["step_s"]))
assert last["s0"]["moe"]["ep_bytes"] < last["s1"]["moe"]["ep_bytes"] < last["s2"]["moe"]["ep_bytes"]
assert last["s0"]["step_s"] < last["s1"]["step_s"] < last["s2"]["step_s"], [last[n]["step_s"] for n in ("s0", "s1", "s2")]
a, b = last["s2"], last["s2b"]
assert a["moe"] == b["moe"] and a["step_s"] == b["step_s"], "the same skewed run twice differs"
PY
bad() { # NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  set +e; mt_mpirun_each 2 "$WORK/$name.exits" "$MT_BIN/meshtrain" "$@" --set output.dir="$WORK/$name" \
    > "$WORK/$name.out" 2> "$WORK/$name.err"; set -e
  mt_each_failed "$WORK/$name.exits" 2 && [ "$(grep -c '^meshtrain: error:' "$WORK/$name.err")" -eq 1 ] &&
    grep -Eq -- "$re" "$WORK/$name.err" || { cat "$WORK/$name.err"; fail "$name: want one line matching /$re/"; }
  echo "ok   $name: $(grep '^meshtrain: error:' "$WORK/$name.err")"
}
bad skew_real "virtual.moe_skew = 1 needs train.device = virtual" --set model.preset=tiny \
  --set data.train="$corpus" --set model.moe_experts=4 --set parallel.dp=2 --set virtual.moe_skew=1
bad skew_dense "virtual.moe_skew = 1: the model has no experts" --set model.preset=tiny \
  --set data.train="$corpus" --set parallel.dp=2 --set train.device=virtual --set train.virtual_hw=h200 \
  --set ckpt.mode=none --set virtual.moe_skew=1
echo PASS
