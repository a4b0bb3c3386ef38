# SIGUSR1 to one rank mid-run: every rank stops at the next step boundary,
# checkpoints, exits with 75; resuming finishes with the same final loss as
# an uninterrupted run (bitwise).
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=150 --set parallel.dp=2 --set train.micro_batch=8 --set model.seq_len=128
   --set train.global_batch=16)
train ref 2 "${S[@]}" --set output.dir="$WORK/ref"
MT_TEST_STEP_SLEEP_S=0.02 "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" \
  "${base[@]}" "${S[@]}" --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null || true' EXIT
mt_signal_rank USR1 "$WORK/run" "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
cat "$WORK/run.log" | tail -3
[ $rc -eq 75 ] || fail "exit code $rc, expected 75"
step=$(wc -l < "$WORK/run/metrics.jsonl")
[ "$step" -lt 150 ] || fail "the run was not stopped early"
[ -f "$WORK/run/checkpoints/step_$step/MANIFEST.json" ] || fail "no checkpoint at step $step"
train resume 2 "${S[@]}" --set train.resume=auto --set output.dir="$WORK/run"
python3 "$CMP" "$WORK/ref" "$WORK/run" --bitwise --steps 150
echo "PASS: stopped at step $step with 75, resumed, same losses"
