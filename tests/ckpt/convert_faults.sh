# meshckpt convert meets the failures of a real file system (issue 23 item
# 1), through the fault switch, in both output modes: a short write then
# ENOSPC, EFBIG in the middle of a file, a failing fsync, a failing close,
# ENOSPC on the index after every shard was written. Each time every rank
# exits 3 by itself, with one line naming the file and the cause, and
# nothing is committed or left behind; the same conversion then succeeds.
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
NP=2
train src $NP --set train.steps=2 --set parallel.dp=2 --set train.micro_batch=4 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/latest"
failing() { # NAME MODE REGEX FAULT
  local name=$1 mode=$2 re=$3 fault=$4 out="$WORK/out_$1"
  set +e
  MT_CKPT_FAULT="$fault" mt_mpirun_each $NP "$WORK/$name.exits" \
    "$M" convert "$SRC" "$out" --mode "$mode" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORK/$name.log"; fail "$name: hung"; }
  mt_each_exited "$WORK/$name.exits" $NP 3 \
    || { cat "$WORK/$name.log" "$WORK/$name.exits"; fail "$name: not every rank exited with 3"; }
  [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep "error:" "$WORK/$name.log" | grep -Eq -- "$re" \
    || { cat "$WORK/$name.log"; fail "$name: want one error line matching /$re/"; }
  ! grep -Eqi "segmentation|signal|core dumped|HDF5-DIAG|left open" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: a crash or HDF5 output"; }
  [ ! -e "$out/latest" ] && ! ls -d "$out"/step_* "$out"/.ballast* 2>/dev/null \
    || { ls -la "$out"; fail "$name: something committed or left behind"; }
  echo "ok   $name: $(grep error: "$WORK/$name.log")"
}
for mode in per-writer shared; do
  failing "short_$mode" "$mode" "rank 1 cannot write .*: No space left on device" \
    "rank=1,op=write,errno=ENOSPC,short=1,after=1"
  failing "efbig_$mode" "$mode" "rank 1 cannot write .*: File too large" "rank=1,op=write,errno=EFBIG,after=2"
  failing "sync_$mode" "$mode" "rank 1 cannot write .*: Input/output error" "rank=1,op=sync,errno=EIO"
  failing "close_$mode" "$mode" "rank 1 cannot write .*: Input/output error" "rank=1,op=close,errno=EIO"
  failing "index_$mode" "$mode" "rank 0 cannot write .*(ckpt|index)\.h5: No space left on device" \
    "rank=0,op=index,errno=ENOSPC"
done
mt_mpirun $NP "$M" convert "$SRC" "$WORK/out_ok" --mode per-writer > "$WORK/ok.log" || { cat "$WORK/ok.log"; fail "the same conversion without a fault"; }
"$M" verify "$WORK/out_ok/latest" > "$WORK/ok.verify" || { cat "$WORK/ok.verify"; fail "it does not verify"; }
echo PASS
