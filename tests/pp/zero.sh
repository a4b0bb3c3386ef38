# zero.sh STEPS CASE... : ZeRO 0-3 under pipeline parallelism. tiny with 8
# layers, global batch 8; each CASE "name np args" (a schedule, pp, dp,
# zero, micro-batch) trains STEPS steps and must give the single-rank run's
# loss at every step (relative 1e-5, NaN fails) and the same gradient norm;
# its --plan-json must equal what the run's counters (memory by category,
# bytes per step on dp, pp) say, rank for rank; every stage launches part
# of its gradient reductions during the schedule (metrics pp.dp_overlapped
# > 0; none with parallel.overlap_dp = false); the first case runs twice
# and must repeat itself bit for bit.
STEPS=$1; shift
MT_NAME=pp_zero; MT_SUFFIX=$(echo "$1" | cut -d' ' -f1)
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=8 --set train.steps="$STEPS"
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=0
        --set train.warmup_steps=3 --set train.lr=3e-3 --set ckpt.mode=none)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8
names=()
for c in "$@"; do
  read -r name np args <<< "$c"
  # shellcheck disable=SC2086
  "$MT_BIN/meshtrain" "${common[@]}" $args --set output.dir="$WORK/$name" \
    --plan-json "$WORK/$name.plan.json" > "$WORK/$name.plan.txt" || fail "plan $name"
  # shellcheck disable=SC2086
  run "$name" "$np" $args
  names+=("$WORK/$name")
done
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "${names[@]}" --rtol 1e-5 --steps "$STEPS"
python3 - "$WORK/ref" "${names[@]}" <<'PY'
import json, sys
def recs(d): return [json.loads(l) for l in open(d + "/metrics.jsonl")]
ref = recs(sys.argv[1])
for run in sys.argv[2:]:
    cur = recs(run)
    for a, b in zip(ref, cur):
        if not abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * abs(a["grad_norm"]):  # NaN fails
            sys.exit("FAIL: %s step %d grad_norm %r vs %r" % (run, a["step"], b["grad_norm"], a["grad_norm"]))
    # dp overlap under pp (every case has dp >= 2): each stage launches gradient bytes during the
    # schedule, none with parallel.overlap_dp = false (ZeRO 0-1)
    off = "overlap_dp = false" in open(run + "/config.ini").read()
    for r in cur:
        p = r["pp"]
        ov, ex = p["dp_overlapped"], p["dp_exposed_s"]
        if len(ov) != len(p["bubble"]) or len(ex) != len(ov) or not all(x >= 0 for x in ex):
            sys.exit("FAIL: %s step %d: per-stage dp figures %r %r" % (run, r["step"], ov, ex))
        if not all((x == 0 if off else 0 < x <= 1) for x in ov):
            sys.exit("FAIL: %s step %d: share of gradient bytes launched during the schedule %r%s"
                     % (run, r["step"], ov, " (overlap off)" if off else ""))
print("ok   grad_norm within 1e-5, dp launched during the schedule, in %d runs" % (len(sys.argv) - 2))
PY
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,pp "$@" || fail "plan and run differ"
read -r name np args <<< "$1"
# shellcheck disable=SC2086
run again "$np" $args
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/$name" "$WORK/again" --bitwise --steps "$STEPS"
echo PASS
