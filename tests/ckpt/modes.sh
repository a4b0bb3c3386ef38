# The two on-disk modes hold the same tensors; convert between them keeps
# every bit; h5dump reads a per-writer tensor whole; a per-writer checkpoint
# with a shard file removed fails clearly in verify and in the loader; a
# per-writer checkpoint resumes under another layout; export writes the model.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=8 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2)
train ref 1 --set train.steps=8 --set parallel.dp=1 --set train.micro_batch=4 --set output.dir="$WORK/ref"
train shared 2 "${S[@]}" --set train.stop_after=4 --set output.dir="$WORK/shared"
train pw 2 "${S[@]}" --set train.stop_after=4 --set ckpt.mode=per-writer --set output.dir="$WORK/pw"
SH="$WORK/shared/checkpoints/step_4"; PW="$WORK/pw/checkpoints/step_4"
ls "$PW"
[ -f "$PW/index.h5" ] && [ -f "$PW/shard-00000.h5" ] && [ -f "$PW/shard-00001.h5" ] || fail "per-writer files missing"
same() { "$MT_BIN/meshckpt" diff "$1" "$2" > "$WORK/diff.log" || { cat "$WORK/diff.log"; fail "$1 and $2 differ"; }; }
same "$SH" "$PW"
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$SH" "$WORK/conv_pw" --mode per-writer
"$MT_BIN/meshckpt" convert "$PW" "$WORK/conv_sh" --mode shared
same "$SH" "$WORK/conv_pw/step_4"
same "$PW" "$WORK/conv_sh/step_4"
mt_mpirun 3 "$MT_BIN/meshckpt" verify "$WORK/conv_pw" --deep
# h5dump sees the whole tensor through the virtual dataset
h5dump -d /model/wte.weight "$PW/index.h5" > "$WORK/wte.txt"
grep -q "SIMPLE { ( 256, 32 )" "$WORK/wte.txt" || fail "h5dump does not see wte.weight as 256 x 32"
! grep -qi "nan" "$WORK/wte.txt" || fail "h5dump read fill values (a source was not found)"
[ "$(grep -c '^   (' "$WORK/wte.txt")" -gt 1000 ] || fail "h5dump printed too little data"
# resume the per-writer checkpoint on 1 rank: continues the reference curve
train resumed 1 --set train.steps=8 --set parallel.dp=1 --set train.micro_batch=4 \
  --set train.resume="$PW" --set output.dir="$WORK/resumed"
python3 "$CMP" "$WORK/ref" "$WORK/resumed" --subset --rtol 1e-5
# a shard file removed
rm -rf "$WORK/broken"; cp -r "$PW" "$WORK/broken"; rm "$WORK/broken/shard-00001.h5"
set +e
"$MT_BIN/meshckpt" verify "$WORK/broken" > "$WORK/verify.log" 2>&1; rc=$?
mt_guard "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
  --set train.resume="$WORK/broken" --set output.dir="$WORK/out_broken" > /dev/null 2> "$WORK/load.err"; rc2=$?
set -e
[ $rc -ne 0 ] && grep -q "shard-00001.h5" "$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify did not name the missing shard"; }
[ $rc2 -ne 0 ] && [ $rc2 -ne 124 ] && [ "$(grep -c '^meshtrain: error:.*shard-00001.h5' "$WORK/load.err")" -eq 1 ] \
  || { cat "$WORK/load.err"; fail "the loader did not name the missing shard in one line"; }
# export for inference, fp32 and bf16
"$MT_BIN/meshckpt" export "$PW" "$WORK/model32.h5"
"$MT_BIN/meshckpt" export "$SH" "$WORK/model16.h5" --dtype bf16
[ "$(h5ls "$WORK/model32.h5" | wc -l)" -eq 28 ] || fail "export wrote $(h5ls "$WORK/model32.h5" | wc -l) tensors"
h5dump -H -d lnf.weight "$WORK/model16.h5" | grep -q "16-bit" || fail "bf16 export is not 16-bit"
# asynchronous saves (per-writer): every one completes, verifies, and resumes
train async 2 "${S[@]}" --set ckpt.mode=per-writer --set ckpt.async=true --set ckpt.every=2 \
  --set ckpt.keep=0 --set output.dir="$WORK/async"
for s in 2 4 6 8; do
  "$MT_BIN/meshckpt" verify "$WORK/async/checkpoints/step_$s" > /dev/null || fail "async step_$s does not verify"
done
grep -q "step_6 committed (written in the background" "$WORK/async.log" || fail "step_6 was not written in the background"
python3 "$CMP" "$WORK/ref" "$WORK/async" --rtol 1e-5 --steps 8
train async_resumed 1 --set train.steps=8 --set parallel.dp=1 --set train.micro_batch=4 \
  --set train.resume="$WORK/async/checkpoints/step_6" --set output.dir="$WORK/async_resumed"
python3 "$CMP" "$WORK/ref" "$WORK/async_resumed" --subset --rtol 1e-5
echo PASS
