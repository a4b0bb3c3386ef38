# Loss spikes (train.on_spike): the test hook MT_TEST_POISON=SAMPLE:FACTOR
# multiplies the loss of the step that trains on window SAMPLE (nan: not
# finite). With on_spike = rollback the run reloads the newest checkpoint,
# skips the windows since it and goes on: it then follows, bit for bit, a
# run that resumed from that checkpoint with train.skip_samples (a run
# that never saw those windows). With on_spike = stop and a factor rule,
# the run ends with exit 3 and one line naming the step and the way past it.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
base=(--set model.preset=tiny --set train.steps=8 --set train.global_batch=8
      --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=0
      --set parallel.dp=2 --set parallel.zero=1 --set ckpt.every=2)

# step 5 trains on windows 32-39: one of them poisoned (not finite)
MT_TEST_POISON=35:nan mt_train rollback 2 "${base[@]}" --set train.on_spike=rollback \
  --set output.dir="$WORK/rollback"
grep 'rolled back to step 4, skipping the 8 windows of steps 5-5' "$WORK/rollback.log" \
  || { cat "$WORK/rollback.log"; fail "no rollback to step 4"; }
python3 - "$WORK/rollback" <<'PY' || fail "rollback: metrics or summary"
import json, sys
run = sys.argv[1]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
assert [r["step"] for r in recs] == list(range(1, 9)), [r["step"] for r in recs]
assert recs[4].get("rollback_from") == 5 and recs[4].get("rollback_skipped") == 8, recs[4]
assert all("rollback_from" not in r for i, r in enumerate(recs) if i != 4)
rb = json.load(open(run + "/summary.json"))["rollbacks"]
assert len(rb) == 1 and rb[0]["at_step"] == 5 and rb[0]["to_step"] == 4, rb
assert rb[0]["skipped_samples"] == 8 and "nan" in rb[0]["why"], rb
print("rollback recorded:", rb[0])
PY

# the report lists the rollback
"$MT_BIN/meshreport" "$WORK/rollback" --out "$WORK/report" > /dev/null || fail "meshreport"
grep -F 'step 5 -> 4 (8 windows skipped: the loss is nan)' "$WORK/report/report.md" \
  || fail "report.md does not list the rollback"

# the same run without the poison to step 4, then on past windows 32-39 by hand
mt_train byhand1 2 "${base[@]}" --set train.stop_after=4 --set output.dir="$WORK/byhand"
mt_train byhand2 2 "${base[@]}" --set output.dir="$WORK/byhand" \
  --set train.resume="$WORK/byhand/checkpoints/step_4" --set train.skip_samples=8
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/byhand" "$WORK/rollback" --bitwise \
  || fail "after the rollback the run is not the one that skipped those windows"

# on_spike = stop with the factor rule: a loss x 50 at step 7 (windows 48-55)
set +e
MT_TEST_POISON=51:50 mt_mpirun 2 "$MT_BIN/meshtrain" "${base[@]}" --set train.spike_factor=3 \
  --set output.dir="$WORK/stop" > "$WORK/stop.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 3 ] || { cat "$WORK/stop.log"; fail "stop: exit $rc, expected 3"; }
want="error: loss spike at step 7: loss [0-9.]+ > train.spike_factor 3 x [0-9.]+, the median"
want+=" of the last 6 steps; train.on_spike = stop \(to go on past it: train.resume = "
want+=".*/checkpoints/step_6 with train.skip_samples = 8\)"
grep -E "$want" "$WORK/stop.log" || { cat "$WORK/stop.log"; fail "stop: no line naming the spike"; }
[ "$(grep -c 'error:' "$WORK/stop.log")" -eq 1 ] || fail "stop: more than one error line"
"$MT_BIN/meshckpt" verify "$WORK/stop/checkpoints/step_6" > /dev/null \
  || fail "step_6 does not verify"

# train.skip_samples with train.resume = auto would skip again at each requeue
set +e
"$MT_BIN/meshtrain" "${base[@]}" --set parallel.dp=1 --set train.resume=auto \
  --set train.skip_samples=8 --check --ranks 1 > "$WORK/skip_auto.log" 2>&1
rc=$?
set -e
want="train.skip_samples = 8 needs train.resume = a checkpoint's step directory"
[ "$rc" -eq 2 ] && grep -q "$want" "$WORK/skip_auto.log" \
  || { cat "$WORK/skip_auto.log"; fail "skip_samples with resume = auto"; }
echo OK
