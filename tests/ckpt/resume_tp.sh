# Checkpoints across tensor-parallel layouts: tp 2 -> 1 and 1 -> 2 (and
# dp x tp 2x2 -> 4x1) continue the uninterrupted loss curve (relative 1e-5),
# and a tp=2 checkpoint re-saved under tp=1 is bitwise the same tensors.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=10)
train ref 1 "${S[@]}" --set train.micro_batch=4 --set output.dir="$WORK/ref"
train tp2 2 "${S[@]}" --set parallel.tp=2 --set train.micro_batch=4 --set train.stop_after=5 \
  --set output.dir="$WORK/tp2"
train tp1 1 "${S[@]}" --set train.micro_batch=4 --set train.stop_after=5 --set output.dir="$WORK/tp1"
train dp2tp2 4 "${S[@]}" --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1 \
  --set parallel.sp=true --set train.micro_batch=2 --set train.stop_after=5 --set output.dir="$WORK/dp2tp2"
train b_2to1 1 "${S[@]}" --set train.micro_batch=4 --set train.resume="$WORK/tp2/checkpoints" \
  --set output.dir="$WORK/b_2to1"
train b_1to2 2 "${S[@]}" --set parallel.tp=2 --set train.micro_batch=4 \
  --set train.resume="$WORK/tp1/checkpoints" --set output.dir="$WORK/b_1to2"
train b_22to41 4 "${S[@]}" --set parallel.dp=4 --set train.micro_batch=2 \
  --set train.resume="$WORK/dp2tp2/checkpoints" --set output.dir="$WORK/b_22to41"
python3 "$CMP" "$WORK/ref" "$WORK/b_2to1" "$WORK/b_1to2" "$WORK/b_22to41" --subset --rtol 1e-5
train resave 1 --set train.steps=5 --set train.micro_batch=4 \
  --set train.resume="$WORK/tp2/checkpoints" --set output.dir="$WORK/resave"
"$MT_BIN/meshckpt" diff "$WORK/tp2/checkpoints" "$WORK/resave/checkpoints" | tail -1 | grep -q "^diff: equal" \
  || fail "a tp=2 checkpoint re-saved under tp=1 differs"
echo PASS
