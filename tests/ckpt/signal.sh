# A stop signal to one rank mid-run (signal.sh SIG CODE REASON): every rank
# stops at the next step boundary, checkpoints, exits with CODE and says so
# ("REASON after step N (checkpointed); exiting with code CODE"); the
# checkpoint resumes to the loss curve of an uninterrupted run (bitwise).
# USR1: preempted, 75 (the job requeues); INT (Ctrl-C): 130.
SIG=$1 CODE=$2 REASON=$3
MT_SUFFIX=$SIG
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=40 --set parallel.dp=2 --set train.micro_batch=2 --set train.threads=1)
train ref 2 "${S[@]}" --set output.dir="$WORK/ref"
MT_TEST_STEP_SLEEP_S=0.05 "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" \
  "${base[@]}" "${S[@]}" --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null || true' EXIT
mt_signal_rank "$SIG" "$WORK/run" "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
tail -3 "$WORK/run.log"
[ $rc -eq "$CODE" ] || fail "SIG$SIG: exit code $rc, expected $CODE"
step=$(wc -l < "$WORK/run/metrics.jsonl")
[ "$step" -lt 40 ] || fail "the run was not stopped early"
grep -q "$REASON after step $step (checkpointed); exiting with code $CODE" "$WORK/run.log" ||
  fail "no line '$REASON after step $step ...'"
[ "$(cat "$WORK/run/checkpoints/latest")" = "step_$step" ] || fail "latest is not step_$step"
[ -f "$WORK/run/checkpoints/step_$step/MANIFEST.json" ] || fail "no complete checkpoint at step $step"
train resume 2 "${S[@]}" --set train.resume=auto --set output.dir="$WORK/run"
python3 "$CMP" "$WORK/ref" "$WORK/run" --bitwise --steps 40
echo "PASS: SIG$SIG at step $step -> checkpoint, exit $CODE, resumed to the same losses"
