# Retention (ckpt.keep = 1): only the newest checkpoint stays; an old one is
# first renamed out of sight (.trash-*), then deleted, so a kill during the
# deletion never leaves a half-deleted step_<N>/ (where strace is there, no
# file under a step_<N>/ name is ever deleted in place); leftovers of
# interrupted deletions and of crashed saves are removed.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=6 --set ckpt.every=2 --set ckpt.keep=1 --set parallel.dp=2 --set train.micro_batch=2)
CK="$WORK/run/checkpoints"
mkdir -p "$CK/.trash-step_1-999" "$CK/step_1.tmp-1-2"
touch "$CK/.trash-step_1-999/ckpt.h5" "$CK/step_1.tmp-1-2/ckpt.h5"
# (not under AddressSanitizer: LeakSanitizer cannot run under ptrace)
if command -v strace >/dev/null && [ -z "${ASAN_OPTIONS:-}" ]; then
  set +e
  strace -f -qq -o "$WORK/trace" -e trace=rename,renameat,renameat2,unlink,unlinkat,rmdir \
    "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
    --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1
  rc=$?
  set -e
  [ $rc -eq 0 ] || { cat "$WORK/run.log"; fail "run failed ($rc)"; }
  grep -Eq 'rename(at2?)?\(.*checkpoints/step_2", .*checkpoints/\.trash-step_2-' "$WORK/trace" \
    || { grep -E "rename|unlink" "$WORK/trace" | head -20; fail "step_2 was not moved aside before deletion"; }
  ! grep -E '(unlink|unlinkat|rmdir)\(.*checkpoints/step_[0-9]+/' "$WORK/trace" \
    || fail "a file of a step_<N>/ was deleted in place"
else
  echo "skip: no strace here, or a sanitizer build (the deletion order is not traced)"
  train run 2 "${S[@]}" --set output.dir="$WORK/run"
fi
[ "$(ls -A "$CK" | sort | tr '\n' ' ')" = "latest step_6 " ] || fail "left in checkpoints/: $(ls -A "$CK")"
"$MT_BIN/meshckpt" verify "$CK/step_6" > "$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify"; }
echo PASS
