# auto.sh: parallel.layout = auto (tiny, 4 layers, global batch 8, 10 steps,
# the cpu-generic cost profile).
#   ranks: on 1, 2 and 4 ranks the planner picks a layout (printed with the
#          runner-up, recorded in summary.json) and the run trains under it:
#          the loss of the single-rank manual run at every step (relative
#          1e-5: any valid layout gives it).
#   requeue: 4 ranks stop at step 5 with a checkpoint; the job comes back on
#          2 ranks with train.resume = auto: re-planned for 2 ranks, it
#          resumes the universal checkpoint and continues the curve of the
#          uninterrupted run (relative 1e-5); summary.json lists both
#          attempts, each with its own layout.
MODE=$1 MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=10
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=0
        --set train.warmup_steps=3 --set train.lr=3e-3 --set metrics.hw=cpu-generic)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" "${@:3}"; }
run ref 1 --set train.micro_batch=8 --set ckpt.mode=none --set output.dir="$WORK/ref"
if [ "$MODE" = ranks ]; then
  for n in 1 2 4; do
    run auto$n $n --set parallel.layout=auto --set ckpt.mode=none --set output.dir="$WORK/auto$n"
    grep "parallel.layout = auto on $n ranks" "$WORK/auto$n.log" || fail "auto$n: no planned layout printed"
    python3 - "$WORK/auto$n/summary.json" "$n" <<'PY'
import json, sys
s, n = json.load(open(sys.argv[1])), int(sys.argv[2])
lay = s["layout"]
assert lay["planned"] == "parallel.layout=auto", lay
assert lay["world"] == n == lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"], lay
print("auto on %d ranks trained under %s" % (n, json.dumps(lay)))
PY
  done
  python3 "$CMP" "$WORK/ref" "$WORK/auto1" "$WORK/auto2" "$WORK/auto4" --rtol 1e-5 --steps 10
else
  run first 4 --set parallel.layout=auto --set train.stop_after=5 --set output.dir="$WORK/requeue"
  run second 2 --set parallel.layout=auto --set train.resume=auto --set output.dir="$WORK/requeue"
  grep "parallel.layout = auto on 4 ranks" "$WORK/first.log" || fail "the first attempt was not planned"
  grep "parallel.layout = auto on 2 ranks" "$WORK/second.log" || fail "the requeued attempt was not re-planned"
  python3 "$CMP" "$WORK/ref" "$WORK/requeue" --rtol 1e-5 --steps 10
  python3 - "$WORK/requeue/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
att = s["attempts"]
assert [a["world"] for a in att] == [4, 2], att
assert att[0]["end_step"] == 5 and att[1]["start_step"] == 5, att
print("attempts:", [(a["world"], a["layout"], a["start_step"], a["end_step"]) for a in att])
PY
fi
echo PASS
