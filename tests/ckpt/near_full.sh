# near_full.sh MODE: saves on a real, nearly full file system (issue 23
# item 1): the checkpoints directory is a tmpfs, and the size at which a run
# that saves twice (step 2, then step 4 with ckpt.keep = 1) just fits is
# found by bisection here, on this machine, for this build; then every size
# a few pages below it is tried too: the sizes where the earlier saves and
# some of step 4's files fit and the rest does not. At every size tried,
# either the run finishes (exit 0) and step_4 verifies, or every rank exits
# 3 by itself with one line naming the file and "No space left on device",
# no crash, nothing of step 4 left behind, and step_2 (when it was
# committed) still there and verifying: a save never commits a checkpoint
# that verify or resume refuses, and retention never deletes the last good
# one for it. Needs a tmpfs: as root in a private mount namespace, else in a
# user namespace; where neither is allowed, it skips (fsize_limit.sh drives
# the other real failure, a file-size limit, without any privilege).
MT_SUFFIX=$1
if [ -z "${MT_NEAR_FULL_NS:-}" ]; then
  if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
    MT_NEAR_FULL_NS=1 exec unshare -m --propagation private bash "$0" "$@"
  elif unshare -Urm true 2>/dev/null; then
    MT_NEAR_FULL_NS=1 exec unshare -Urm bash "$0" "$@"
  fi
fi
MODE=$1
source "$(dirname "$0")/common_ckpt.sh"
ckpt_mode "$MODE"
NP=2
MNT="$WORK/mnt"
mkdir -p "$MNT"
mount -t tmpfs -o size=64k tmpfs "$MNT" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
umount "$MNT"
S=(--set train.steps=4 --set ckpt.every=2 --set ckpt.keep=1 --set parallel.dp=$NP
   --set train.micro_batch=4 "${M[@]}")
PAGE=4096


# try BYTES: one run with the checkpoints on a tmpfs of BYTES; prints ok or
# full, fails the test when an outcome breaks a promise
try() {
  local bytes=$1 name="size_$1" out="$WORK/run_$1"

  rm -rf "$out"
  mkdir -p "$out"
  mount -t tmpfs -o size="$bytes" tmpfs "$MNT" || fail "mount a tmpfs of $bytes bytes"
  ln -s "$MNT" "$out/checkpoints" # the run's other outputs stay on disk
  set +e
  mt_mpirun_each "$NP" "$WORK/$name.exits" \
    "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set output.dir="$out" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  local verdict
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORK/$name.log"; fail "$name: hung"; }
  ! grep -Eqi "segmentation|signal|core dumped|HDF5-DIAG" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: a crash or HDF5's own error output"; }
  if mt_each_exited "$WORK/$name.exits" "$NP" 0; then
    verdict=ok
    [ "$(cat "$MNT/latest")" = step_4 ] && [ ! -e "$MNT/step_2" ] \
      || { ls -la "$MNT"; fail "$name: finished, but latest is not step_4 alone"; }
    mt_mpirun 2 "$MT_BIN/meshckpt" verify "$MNT/$(cat "$MNT/latest")" > "$WORK/$name.verify" \
      || { cat "$WORK/$name.verify"; fail "$name: exit 0, but step_4 does not verify"; }
  else
    verdict=full
    mt_each_exited "$WORK/$name.exits" "$NP" 3 \
      || { cat "$WORK/$name.log" "$WORK/$name.exits"; fail "$name: not every rank exited with 3"; }
    [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] &&
      grep "^meshtrain: error:" "$WORK/$name.log" | grep -Eq "checkpoint step [24]: .*: No space left on device" \
      || { cat "$WORK/$name.log"; fail "$name: want one error line naming the file and the full disk"; }
    [ ! -e "$MNT/step_4" ] && ! ls -d "$MNT"/*.tmp-* "$MNT"/.ballast* 2>/dev/null \
      || { ls -la "$MNT"; fail "$name: step 4 was committed or left behind"; }
    if grep -q "error: checkpoint step 4" "$WORK/$name.log"; then
      [ "$(cat "$MNT/latest")" = step_2 ] || { ls -la "$MNT"; fail "$name: step_2 lost"; }
      mt_mpirun 2 "$MT_BIN/meshckpt" verify "$MNT/$(cat "$MNT/latest")" > "$WORK/$name.verify" \
        || { cat "$WORK/$name.verify"; fail "$name: step_2 does not verify"; }
    fi
  fi
  umount "$MNT"
  echo "$verdict" > "$WORK/$name.verdict"
  echo "$verdict"
}

# the bracket: a tmpfs that holds both saves, and one that holds nothing
lo=$((16 * PAGE)) hi=$((1024 * PAGE))
[ "$(try $hi)" = ok ] || fail "the run does not fit even $hi bytes"
[ "$(try $lo)" = full ] || fail "the run fits in $lo bytes?"
while [ $((hi - lo)) -gt $PAGE ]; do
  mid=$(((lo + hi) / 2 / PAGE * PAGE))
  if [ "$(try $mid)" = ok ]; then hi=$mid; else lo=$mid; fi
done
echo "bisection: the two saves fit in $hi bytes, not in $lo ($(ls "$WORK"/size_*.verdict | wc -l) runs)"
# at the edge and just below it: step 2 and part of step 4 fit
steps4=0
for k in 0 1 2 4; do
  b=$((lo - k * PAGE))
  if [ -f "$WORK/size_$b.verdict" ]; then v=$(cat "$WORK/size_$b.verdict"); else v=$(try $b); fi
  grep -q "error: checkpoint step 4" "$WORK/size_$b.log" 2>/dev/null && steps4=$((steps4 + 1))
  echo "  $b bytes: $v"
done
[ $steps4 -gt 0 ] || fail "no size below the edge failed in step 4's save (the near-full case was not reached)"
echo "PASS ($(ls "$WORK"/size_*.verdict | wc -l) runs; $steps4 sizes failed in the save of step 4 with step_2 kept)"
