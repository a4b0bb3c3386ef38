# Checkpoints across pipeline layouts: pp 2 -> 1 and 1 -> 2 (4 layers) continue
# the uninterrupted loss curve (relative 1e-5); a pp=2 checkpoint re-saved
# under pp=1 holds bitwise the same tensors.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=10 --set model.n_layer=4)
train ref 1 "${S[@]}" --set train.micro_batch=4 --set output.dir="$WORK/ref"
train pp2 2 "${S[@]}" --set parallel.pp=2 --set train.micro_batch=2 --set train.stop_after=5 \
  --set output.dir="$WORK/pp2"
train pp1 1 "${S[@]}" --set train.micro_batch=4 --set train.stop_after=5 --set output.dir="$WORK/pp1"
train b_2to1 1 "${S[@]}" --set train.micro_batch=4 --set train.resume="$WORK/pp2/checkpoints" \
  --set output.dir="$WORK/b_2to1"
train b_1to2 2 "${S[@]}" --set parallel.pp=2 --set train.micro_batch=2 \
  --set train.resume="$WORK/pp1/checkpoints" --set output.dir="$WORK/b_1to2"
python3 "$CMP" "$WORK/ref" "$WORK/b_2to1" "$WORK/b_1to2" --subset --rtol 1e-5
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/pp2/checkpoints" --deep || fail "verify of the pp=2 checkpoint"
train resave 1 --set train.steps=5 --set model.n_layer=4 --set train.micro_batch=4 \
  --set train.resume="$WORK/pp2/checkpoints" --set output.dir="$WORK/resave"
"$MT_BIN/meshckpt" diff "$WORK/pp2/checkpoints" "$WORK/resave/checkpoints" | tail -1 | grep -q "^diff: equal" \
  || fail "a pp=2 checkpoint re-saved under pp=1 differs"
echo PASS
