# faults.sh MODE RANKS (MODE: shared, per-writer or async): the save of step 8
# fails on one rank only, through the fault switch MT_CKPT_FAULT, in each way
# a file system fails: a full disk, a file that cannot be created, a short
# write followed by ENOSPC, EFBIG in the middle of a file, a failing fsync
# or close, ENOSPC on the index after every shard succeeded; and in rank 0's
# directory (read-only). Each time: one error line naming the file and the
# cause, every rank exits by itself with 3 (no hang, no crash) and, where
# the save is synchronous, none trains past it (step 8 is the last line of
# metrics.jsonl), step_4 stays the newest complete checkpoint, verifies, and a rerun
# resumes from it and finishes. Loading that fails on one rank ends the same
# way: exit 2 for a file it may not open (input that will never work), 3 for
# an I/O error (a runtime condition a retry may get past).
MT_SUFFIX=$1-$2
MODE=$1
NP=$2
source "$(dirname "$0")/common_ckpt.sh"
ckpt_mode "$MODE"
LAST=$((NP - 1))
# steps 4 and 8 are periodic saves (asynchronous in async mode); 12 is the end
S=(--set train.steps=12 --set ckpt.every=4 --set ckpt.keep=0 --set parallel.dp="$NP"
   --set train.micro_batch=$((8 / NP)) "${M[@]}")

# failing NAME REGEX FAULT: a run (output in NAME/) whose save of step 8
# fails, the fault switch set to FAULT (it stamps NAME.stamp when it fires).
# Every rank's exit code and exit time go to NAME.exits; mpirun is asked not
# to kill the other ranks when the first one exits, so each must exit by itself.
# (The times are printed, not judged: the hang guard alone decides "no hang".)
failing() {
  local name=$1 re=$2 fault=$3 out="$WORK/$1"
  rm -f "$WORK/$name.stamp"
  set +e
  MT_CKPT_FAULT="$fault,step=8,stamp=$WORK/$name.stamp" mt_mpirun_each "$NP" "$WORK/$name.exits" \
    "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set output.dir="$out" \
    > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?
  set -e
  cat "$WORK/$name.out" "$WORK/$name.err" > "$WORK/$name.log"
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORK/$name.log"; fail "$name: hung (rc $rc)"; }
  # every rank exited, with 3 (mpirun itself then says 0: it was told not to abort)
  mt_each_exited "$WORK/$name.exits" "$NP" 3 \
    || { cat "$WORK/$name.exits"; fail "$name: not every rank exited with 3"; }
  [ "$(grep -c "^meshtrain: error:" "$WORK/$name.log")" -eq 1 ] &&
    [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] \
    || { cat "$WORK/$name.log"; fail "$name: want exactly one error line"; }
  grep "^meshtrain: error:" "$WORK/$name.log" | grep -Eq -- "$re" \
    || { cat "$WORK/$name.log"; fail "$name: the error does not match /$re/"; }
  ! grep -Eqi "fatal|segmentation|signal|\(HDF5 error\)" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: a crash or a bare HDF5 error"; }
  # a synchronous save fails inside step 8: nobody trained on after it (an
  # asynchronous one is found failed at a later step boundary)
  local last; last=$(tail -1 "$out/metrics.jsonl" | python3 -c "import json, sys; print(json.load(sys.stdin)['step'])")
  [ "$MODE" = async ] || [ "$last" = 8 ] || fail "$name: metrics.jsonl ends at step $last, not at the failed save's step 8"
  # the fault switch stamps when it fired: how long the last rank took to leave (a figure)
  if [ -f "$WORK/$name.stamp" ]; then
    local lag; lag=$(awk 'NR == FNR { t = $2; next } { if ($2 - t > m) m = $2 - t } END { printf "%.2f", m }' \
      "$WORK/$name.stamp" "$WORK/$name.exits")
    echo "ok   $name: every rank exited with 3 after step 8 (the last $lag s after the error)"
  fi
  # step_4 is the newest complete checkpoint; nothing of step 8 is left
  local ck="$out/checkpoints"
  [ -f "$ck/step_4/MANIFEST.json" ] || fail "$name: step_4 lost"
  [ ! -e "$ck/step_8" ] || fail "$name: a step_8 appeared"
  [ "$(cat "$ck/latest")" = step_4 ] || fail "$name: latest is $(cat "$ck/latest")"
  ! ls -d "$ck"/*.tmp-* "$ck"/.ballast* 2>/dev/null || fail "$name: leftovers of the failed save"
  echo "ok   $name: $(grep '^meshtrain: error:' "$WORK/$name.log")"
}

# a full disk on the last rank only
failing disk_full "checkpoint step 8: rank $LAST cannot write .*: No space left on device" \
  "rank=$LAST,op=write,errno=ENOSPC"
# the last rank cannot create or open its file
failing no_create "rank $LAST cannot write .*: Permission denied" \
  "rank=$LAST,op=create,errno=EACCES"
# the failures of a real file system, at 2 ranks (the 4-rank runs keep to
# the three above)
if [ "$NP" -eq 2 ]; then
# a short write (half the bytes), then ENOSPC on the next call
failing short_write "rank $LAST cannot write .*: No space left on device" \
  "rank=$LAST,op=write,errno=ENOSPC,short=1,after=2"
# EFBIG in the middle of a file (the third write of the last rank)
failing efbig "rank $LAST cannot write .*: File too large" \
  "rank=$LAST,op=write,errno=EFBIG,after=2"
# fsync fails (NFS and Lustre report write-back errors there), close fails
failing sync_eio "rank $LAST cannot write .*: Input/output error" \
  "rank=$LAST,op=sync,errno=EIO"
failing close_eio "rank $LAST cannot write .*: Input/output error" \
  "rank=$LAST,op=close,errno=EIO"
# ENOSPC on the index, after every rank's data is written
failing index_full "rank 0 cannot write .*(ckpt|index)\.h5: No space left on device" \
  "rank=0,op=index,errno=ENOSPC"
fi
# the checkpoints directory has become read-only
failing read_only "rank 0 cannot create .*step_8\.tmp-.*: Read-only file system" \
  "rank=0,op=create,errno=EROFS"
# (a real full disk, at every size near the edge: near_full.sh; a real
# file-size limit: fsize_limit.sh)

# loading fails on one rank (it cannot open the file; a read fails): one
# line, every rank exits by itself with 2, nothing hangs (a parallel open that
# fails on one rank would leave the others waiting inside HDF5)
# failing_load NAME CODE REGEX FAULT [meshtrain args]
failing_load() {
  local name=$1 code=$2 re=$3 fault=$4; shift 4
  set +e
  MT_CKPT_FAULT="$fault" mt_mpirun_each "$NP" "$WORK/$name.exits" \
    "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set train.resume=auto \
    --set output.dir="$WORK/disk_full" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORK/$name.log"; fail "$name: hung"; }
  mt_each_exited "$WORK/$name.exits" "$NP" "$code" \
    || { cat "$WORK/$name.log" "$WORK/$name.exits"; fail "$name: not every rank exited with $code"; }
  [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep "^meshtrain: error:" "$WORK/$name.log" | grep -Eq -- "$re" \
    || { cat "$WORK/$name.log"; fail "$name: want one error line matching /$re/"; }
  echo "ok   $name: exit $code: $(grep '^meshtrain: error:' "$WORK/$name.log")"
}
failing_load load_open 2 "rank $LAST cannot open .*: Permission denied" "rank=$LAST,op=open,errno=EACCES"
failing_load load_read 3 "unreadable data on rank $LAST: Input/output error" "rank=$LAST,op=read,errno=EIO"
failing_load load_read_noverify 3 "rank $LAST cannot read .*: Input/output error" \
  "rank=$LAST,op=read,errno=EIO" --set ckpt.verify_on_load=false

# the previous checkpoint verifies and resumes
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/disk_full/checkpoints/step_4" > "$WORK/verify.log" \
  || { cat "$WORK/verify.log"; fail "step_4 does not verify"; }
train resume "$NP" "${S[@]}" --set train.resume=auto --set output.dir="$WORK/disk_full"
grep -q "resumed from .*step_4 " "$WORK/resume.log" || { cat "$WORK/resume.log"; fail "did not resume from step_4"; }
[ "$(cat "$WORK/disk_full/checkpoints/latest")" = step_12 ] || fail "the resumed run did not finish"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/disk_full/checkpoints/step_12" > "$WORK/verify12.log" \
  || { cat "$WORK/verify12.log"; fail "step_12 does not verify"; }
echo PASS
