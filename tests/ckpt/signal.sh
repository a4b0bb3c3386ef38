# SIGUSR1 to one rank mid-run: every rank stops at the next step boundary,
# checkpoints, exits with 75; resuming finishes with the same final loss as
# an uninterrupted run (bitwise).
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=150 --set parallel.dp=2 --set train.micro_batch=8 --set model.seq_len=128
   --set train.global_batch=16)
train ref 2 "${S[@]}" --set output.dir="$WORK/ref"
"${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
  --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null || true' EXIT
# three steps done (for as long as the run lives: no guessed delay)
while kill -0 "$launcher" 2>/dev/null; do
  [ -f "$WORK/run/metrics.jsonl" ] && [ "$(wc -l < "$WORK/run/metrics.jsonl")" -ge 3 ] && break
  sleep 0.1
done
# one rank only (not the launcher): the others learn of it at the step boundary
rank_pid=$(pgrep -f "output.dir=$WORK/run" | while read -r p; do
  if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = meshtrain ]; then echo "$p"; fi; done | head -1 || true)
[ -n "$rank_pid" ] || fail "no rank process found (the run ended too early?)"
kill -USR1 "$rank_pid"
set +e; wait "$launcher"; rc=$?; set -e
cat "$WORK/run.log" | tail -3
[ $rc -eq 75 ] || fail "exit code $rc, expected 75"
step=$(wc -l < "$WORK/run/metrics.jsonl")
[ "$step" -lt 150 ] || fail "the run was not stopped early"
[ -f "$WORK/run/checkpoints/step_$step/MANIFEST.json" ] || fail "no checkpoint at step $step"
train resume 2 "${S[@]}" --set train.resume=auto --set output.dir="$WORK/run"
python3 "$CMP" "$WORK/ref" "$WORK/run" --bitwise --steps 150
echo "PASS: stopped at step $step with 75, resumed, same losses"
