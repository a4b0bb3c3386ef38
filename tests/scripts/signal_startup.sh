# SIGUSR1 or SIGTERM to every rank during start-up (as Slurm signals the
# tasks of a step; here a resume that waits in set-up: MT_TEST_SETUP_SLEEP_S)
# stops the run cleanly: every rank exits within seconds (75 for USR1, the
# requeue code; 76 for TERM, cancelled for good), nothing new is written as a
# checkpoint, and the earlier checkpoint and metrics history stay as they were.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
args=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8 --set train.micro_batch=2
      --set data.train="$corpus" --set train.eval_every=0 --set parallel.dp=2 --set output.dir="$WORK/run")
mt_mpirun 2 "$MT_BIN/meshtrain" "${args[@]}" --set train.stop_after=3 > "$WORK/first.log" 2>&1 \
  || { cat "$WORK/first.log"; fail "first run"; }
cp "$WORK/run/metrics.jsonl" "$WORK/metrics.before"
for sig in USR1 TERM; do
  MT_TEST_SETUP_SLEEP_S=20 "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${args[@]}" \
    --set train.resume=auto > "$WORK/$sig.log" 2>&1 &
  launcher=$!
  trap 'kill "$launcher" 2>/dev/null || true' EXIT
  pids=""
  for _ in $(seq 1 100); do
    pids=$(pgrep -f "output.dir=$WORK/run" | while read -r p; do
      [ "$(cat /proc/"$p"/comm 2>/dev/null)" = meshtrain ] && echo "$p"; done || true)
    [ "$(echo "$pids" | grep -c .)" -eq 2 ] && break
    sleep 0.1
  done
  [ "$(echo "$pids" | grep -c .)" -eq 2 ] || fail "expected 2 rank processes, found '$pids'"
  sleep 1
  start=$(date +%s)
  # shellcheck disable=SC2086
  kill -"$sig" $pids
  set +e; wait "$launcher"; rc=$?; set -e
  elapsed=$(( $(date +%s) - start ))
  tail -2 "$WORK/$sig.log"
  want=75; [ "$sig" = TERM ] && want=76
  [ $rc -eq $want ] || fail "SIG$sig during start-up: exit code $rc, expected $want"
  [ $elapsed -le 15 ] || fail "SIG$sig: took ${elapsed}s to stop"
  grep -q "before the first step" "$WORK/$sig.log" || fail "SIG$sig: no clean-stop line"
  [ ! -e "$WORK/run/checkpoints/step_4" ] || fail "SIG$sig: a new checkpoint was written"
  [ -f "$WORK/run/checkpoints/step_3/MANIFEST.json" ] || fail "SIG$sig: the step-3 checkpoint is gone"
  cmp -s "$WORK/metrics.before" "$WORK/run/metrics.jsonl" || fail "SIG$sig: metrics history changed"
done
echo PASS
