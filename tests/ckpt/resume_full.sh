# Resume into a full disk (issue 23 item 5): the run's directory is a tmpfs
# filled to the last byte after the first run checkpointed; the resume reads
# the checkpoint, then cannot write its outputs: every rank exits 3 (a
# runtime condition a requeue may get past; 2 is for input that will never
# work) with one line naming the file and the cause, and step_2 and the
# metrics are as they were. With space again, the same resume finishes.
MT_SUFFIX=
if [ -z "${MT_RESUME_FULL_NS:-}" ]; then
  if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
    MT_RESUME_FULL_NS=1 exec unshare -m --propagation private bash "$0" "$@"
  elif unshare -Urm true 2>/dev/null; then
    MT_RESUME_FULL_NS=1 exec unshare -Urm bash "$0" "$@"
  fi
fi
source "$(dirname "$0")/common_ckpt.sh"
MNT="$WORK/mnt"
mkdir -p "$MNT"
mount -t tmpfs -o size=4m tmpfs "$MNT" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
S=(--set parallel.dp=2 --set train.micro_batch=4 --set output.dir="$MNT/run")
train first 2 "${S[@]}" --set train.steps=2
cp "$MNT/run/metrics.jsonl" "$WORK/metrics.before"
dd if=/dev/zero of="$MNT/filler" bs=64k 2>/dev/null || true # until the disk is full
set +e
mt_mpirun_each 2 "$WORK/exits" "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set train.steps=4 \
  --set train.resume=auto > "$WORK/full.log" 2>&1
set -e
mt_each_exited "$WORK/exits" 2 3 || { cat "$WORK/full.log" "$WORK/exits"; fail "not every rank exited with 3"; }
[ "$(grep -c "error:" "$WORK/full.log")" -eq 1 ] && grep "^meshtrain: error:" "$WORK/full.log" | grep -q "metrics.jsonl.*No space left on device" \
  || { cat "$WORK/full.log"; fail "want one line naming the file and the full disk"; }
cmp -s "$MNT/run/metrics.jsonl" "$WORK/metrics.before" || fail "the metrics changed"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$MNT/run/checkpoints/latest" > "$WORK/verify.log" \
  || { cat "$WORK/verify.log"; fail "step_2 does not verify"; }
echo "ok   full disk on resume: exit 3: $(grep '^meshtrain: error:' "$WORK/full.log")"
rm -f "$MNT/filler"
train again 2 "${S[@]}" --set train.steps=4 --set train.resume=auto
grep -q "resumed from .*step_2 " "$WORK/again.log" && [ "$(cat "$MNT/run/checkpoints/latest")" = step_4 ] \
  || { cat "$WORK/again.log"; fail "the resume with space again did not finish"; }
umount "$MNT"
echo PASS
