# crash.sh PHASE: rank 0 is killed during the final save at PHASE (create,
# write, rename, latest). Nothing hangs; the previous complete checkpoint
# survives; a rerun with train.resume=auto finishes with the same final loss
# as an uninterrupted run (bitwise: same layout).
MT_SUFFIX=$1
PHASE=$1
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=7 --set ckpt.every=3 --set parallel.dp=2 --set train.micro_batch=2 --set ckpt.keep=0)
train ref 2 "${S[@]}" --set output.dir="$WORK/ref"
set +e
mt_guard "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
  --set ckpt.test_crash="$PHASE" --set output.dir="$WORK/run" > "$WORK/crash.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || { cat "$WORK/crash.log"; fail "the crashing run exited 0"; }
# (137 is the killed rank's own signal 9; 124 is the hang guard's)
[ $rc -ne 124 ] || { cat "$WORK/crash.log"; fail "the crashing run hung (stopped by the hang guard)"; }
grep -q "killing rank 0 at phase '$PHASE'" "$WORK/crash.log" || { cat "$WORK/crash.log"; fail "crash point not reached"; }
for s in 3 6; do
  [ -f "$WORK/run/checkpoints/step_$s/MANIFEST.json" ] || fail "complete checkpoint step_$s lost"
done
case $PHASE in
  latest) [ -f "$WORK/run/checkpoints/step_7/MANIFEST.json" ] || fail "step_7 should be complete" ;;
  *) [ ! -e "$WORK/run/checkpoints/step_7" ] || fail "an incomplete step_7 is visible" ;;
esac
train resume 2 "${S[@]}" --set train.resume=auto --set output.dir="$WORK/run"
want=$([ "$PHASE" = latest ] && echo 7 || echo 6)
grep -q "resumed from .*step_$want " "$WORK/resume.log" || { cat "$WORK/resume.log"; fail "did not resume from step_$want"; }
python3 "$CMP" "$WORK/ref" "$WORK/run" --bitwise --steps 7
[ "$(cat "$WORK/run/checkpoints/latest")" = "step_7" ] || fail "latest does not point at step_7"
! ls -d "$WORK"/run/checkpoints/*.tmp-* 2>/dev/null || fail "leftover temporary directories"
echo PASS
