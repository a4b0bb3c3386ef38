# SIGUSR1 or SIGTERM to every rank during start-up (as Slurm signals the
# tasks of a step; here a resume that waits in set-up: MT_TEST_SETUP_SLEEP_S)
# stops the run cleanly: every rank exits 75 for USR1 (the requeue code) and
# 76 for TERM (cancelled for good), nothing new is written as a checkpoint, and the earlier checkpoint and metrics history stay as they
# were. The set-up wait is an hour long: only the signal can end it before
# the hang guard does. The signal goes out once every rank catches USR1 and
# TERM (/proc/PID/status SigCgt), not after a guessed delay.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
args=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8 --set train.micro_batch=2
      --set data.train="$corpus" --set train.eval_every=0 --set parallel.dp=2 --set output.dir="$WORK/run")
mt_mpirun 2 "$MT_BIN/meshtrain" "${args[@]}" --set train.stop_after=3 > "$WORK/first.log" 2>&1 \
  || { cat "$WORK/first.log"; fail "first run"; }
cp "$WORK/run/metrics.jsonl" "$WORK/metrics.before"
# catching PID...: every PID has handlers for USR1 (bit 9 of SigCgt) and TERM (bit 14)
catching() {
  local p mask
  for p in "$@"; do
    mask=$(awk '/^SigCgt:/ { print $2 }' "/proc/$p/status" 2>/dev/null) || return 1
    [ -n "$mask" ] && (( (16#$mask & 0x4200) == 0x4200 )) || return 1
  done
}
for sig in USR1 TERM; do
  MT_TEST_SETUP_SLEEP_S=3600 "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" \
    "${args[@]}" --set train.resume=auto > "$WORK/$sig.log" 2>&1 &
  launcher=$!
  trap 'kill "$launcher" 2>/dev/null || true' EXIT
  # wait (for as long as the launcher lives) for both ranks to catch the signals
  pids=""
  while kill -0 "$launcher" 2>/dev/null; do
    pids=$(mt_rank_pids "$WORK/run")
    # shellcheck disable=SC2086
    [ "$(echo "$pids" | grep -c .)" -eq 2 ] && catching $pids && break
    sleep 0.1
  done
  [ "$(echo "$pids" | grep -c .)" -eq 2 ] || { cat "$WORK/$sig.log"; fail "expected 2 rank processes, found '$pids'"; }
  # shellcheck disable=SC2086
  kill -"$sig" $pids
  set +e; wait "$launcher"; rc=$?; set -e
  tail -2 "$WORK/$sig.log"
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "SIG$sig during start-up: the set-up wait went on (hang guard)"
  want=75; [ "$sig" = TERM ] && want=76
  [ $rc -eq $want ] || fail "SIG$sig during start-up: exit code $rc, expected $want"
  grep -q "before the first step" "$WORK/$sig.log" || fail "SIG$sig: no clean-stop line"
  [ ! -e "$WORK/run/checkpoints/step_4" ] || fail "SIG$sig: a new checkpoint was written"
  [ -f "$WORK/run/checkpoints/step_3/MANIFEST.json" ] || fail "SIG$sig: the step-3 checkpoint is gone"
  cmp -s "$WORK/metrics.before" "$WORK/run/metrics.jsonl" || fail "SIG$sig: metrics history changed"
done
echo PASS
