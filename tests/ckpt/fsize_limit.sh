# A real file-size limit on one rank (ulimit -f in that rank's shell,
# SIGXFSZ ignored: the kernel then fails the write with EFBIG), issue 23 item
# 2: in each save mode, with the limit on the last rank or on rank 0, and in
# meshckpt convert, the rank that hits the limit reports it and every rank
# exits 3 by itself: one error line naming the file and "File too large", no
# crash (no exit 139: nothing of HDF5 is left open when a rank leaves through
# the error path), nothing committed, nothing left behind.
source "$(dirname "$0")/common_ckpt.sh"
NP=2
S=(--set train.steps=2 --set ckpt.every=2 --set parallel.dp=2 --set train.micro_batch=4)
# limited NAME RANK KB CMD...: CMD on NP ranks, rank RANK under ulimit -f KB
# (KiB); every rank's exit code to NAME.exits
limited() {
  local name=$1 rank=$2 kb=$3; shift 3
  rm -f "$WORK/$name.exits"
  set +e
  env OMPI_MCA_orte_abort_on_non_zero_status=0 MT_EXITS="$WORK/$name.exits" LIMIT_RANK="$rank" \
    LIMIT_KB="$kb" timeout --kill-after=10 120 "$MT_MPIEXEC" --oversubscribe -n "$NP" bash -c '
      if [ "$OMPI_COMM_WORLD_RANK" = "$LIMIT_RANK" ]; then ulimit -f "$LIMIT_KB"; fi
      trap "" XFSZ
      "$0" "$@"; rc=$?; echo "$rc" >> "$MT_EXITS"; exit $rc' "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORK/$name.log"; fail "$name: hung"; }
  [ "$(grep -c '^3$' "$WORK/$name.exits")" -eq "$NP" ] \
    || { cat "$WORK/$name.log" "$WORK/$name.exits"; fail "$name: not every rank exited with 3"; }
  [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep "error:" "$WORK/$name.log" | grep -q "File too large" \
    || { cat "$WORK/$name.log"; fail "$name: want one error line saying File too large"; }
  ! grep -Eqi "segmentation|signal|core dumped|HDF5-DIAG" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: a crash or HDF5's own error output"; }
  echo "ok   $name: $(grep error: "$WORK/$name.log")"
}
# nothing committed under DIR, nothing left behind
nothing() {
  [ ! -e "$1/latest" ] && ! ls -d "$1"/step_* "$1"/.ballast* "$1"/.trash* 2>/dev/null \
    || { ls -la "$1"; fail "$1: something was committed or left behind"; }
}
for mode in per-writer shared async; do
  case $mode in
    async) M=(--set ckpt.mode=per-writer --set ckpt.async=true) ;;
    *) M=(--set ckpt.mode="$mode") ;;
  esac
  # the last rank's part is about 230 KB: 64 KiB is too little
  limited "save_$mode" 1 64 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" "${M[@]}" \
    --set output.dir="$WORK/$mode"
  grep "error:" "$WORK/save_$mode.log" | grep -q "rank 1 cannot write" || fail "save_$mode: not rank 1"
  nothing "$WORK/$mode/checkpoints"
done
# rank 0, which lays out the shared file (its whole size is tried first)
limited save_rank0 0 64 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set ckpt.mode=shared \
  --set output.dir="$WORK/rank0"
grep "error:" "$WORK/save_rank0.log" | grep -q "rank 0 cannot write .*ckpt.h5: File too large (the file-size limit" \
  || fail "save_rank0: the message does not name the limit"
nothing "$WORK/rank0/checkpoints"
# the same runs without the limit save, and a conversion under it fails alike
train unlimited "$NP" "${S[@]}" --set ckpt.mode=per-writer --set output.dir="$WORK/unlimited"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/unlimited/checkpoints/latest" > "$WORK/verify.log" \
  || { cat "$WORK/verify.log"; fail "the save without a limit does not verify"; }
for mode in per-writer shared; do
  limited "convert_$mode" 1 64 "$MT_BIN/meshckpt" convert "$WORK/unlimited/checkpoints/latest" \
    "$WORK/conv_$mode" --mode "$mode"
  nothing "$WORK/conv_$mode"
done
echo PASS
