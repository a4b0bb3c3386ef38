# data.balance = flops (issue 38, ByteScale's balancing over dp at the
# granularity of windows): on a long-tail mix of documents (85% of 8-15
# tokens, 15% of 60-460, windows of 128), the step's windows handed to the
# dp ranks by their FLOPs train the losses of the same windows in sample
# order and of one rank (relative 1e-5 at each of 6 steps, the same
# data_hash), at dp = 4 and at dp = 2 x cp = 2; the plan is the same on a
# rerun (the same bits); the FLOP imbalance over the dp x cp ranks
# (metrics.jsonl flop_imbalance) is lower on average than in sample order
# and at most 1.10 at every step.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/mix.sh"
mix_setup 128
common=("${mix[@]}")
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run one 1
run order 4 --set parallel.dp=4
run flops 4 --set parallel.dp=4 --set data.balance=flops
run flops_again 4 --set parallel.dp=4 --set data.balance=flops
run dpcp 4 --set parallel.dp=2 --set parallel.cp=2 --set data.balance=flops
CMP="$MT_SRC/tests/scripts/compare_runs.py"
python3 "$CMP" "$WORK/one" "$WORK/order" "$WORK/flops" "$WORK/dpcp" --rtol 1e-5 --steps 6
python3 "$CMP" "$WORK/flops" "$WORK/flops_again" --bitwise --steps 6
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def rows(run):
    return [json.loads(l) for l in open(f"{w}/{run}/metrics.jsonl")]
hashes = {run: [r["data_hash"] for r in rows(run)] for run in ("one", "order", "flops", "dpcp")}
if len({tuple(h) for h in hashes.values()}) != 1 or len(hashes["one"]) != 6:
    sys.exit(f"FAIL: the global batches differ: {hashes}")
print("ok   the same windows in every step of every run (data_hash)")
imb = {run: [r["flop_imbalance"] for r in rows(run)] for run in ("order", "flops", "dpcp")}
mean = {k: sum(v) / len(v) for k, v in imb.items()}
print("     flop_imbalance per step: " + "; ".join(f"{k} {[round(x, 3) for x in v]}" for k, v in imb.items()))
if not mean["flops"] < mean["order"]:
    sys.exit(f"FAIL: balanced by FLOPs {mean['flops']:.4f} is not below sample order {mean['order']:.4f}")
for k in ("flops", "dpcp"):
    if not all(1.0 <= x <= 1.10 for x in imb[k]):
        sys.exit(f"FAIL: {k}: an imbalance outside [1, 1.10]: {imb[k]}")
print(f"ok   mean imbalance {mean['flops']:.4f} balanced, {mean['order']:.4f} in sample order")
PY
# meshreport's steps.csv carries each step's imbalance
"$MT_BIN/meshreport" "$WORK/flops" --out "$WORK/report" > /dev/null || fail "meshreport"
python3 - "$WORK" <<'PY'
import csv, json, sys
w = sys.argv[1]
got = [float(r["flop_imbalance"]) for r in csv.DictReader(open(f"{w}/report/steps.csv"))]
want = [json.loads(l)["flop_imbalance"] for l in open(f"{w}/flops/metrics.jsonl")]
assert len(got) == 6 and all(abs(a - b) <= 1e-8 * b for a, b in zip(got, want)), (got, want)
print("ok   steps.csv: flop_imbalance of each step")
PY
echo PASS
