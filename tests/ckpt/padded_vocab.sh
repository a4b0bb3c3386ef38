# A padded vocabulary across tensor-parallel layouts: vocab 250 is stored as
# 256 rows at tp = 1, 2 and 4 (a multiple of 64 x tp) but checkpointed as its
# 250 true rows. Saved at tp = 4, resumed at tp = 1 and tp = 2: the curve
# continues the uninterrupted tp = 1 run (relative 1e-5); the tp = 4
# checkpoint re-saved at tp = 1 holds bitwise the same tensors.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=8 --set model.vocab_size=250 --set train.micro_batch=4)
train ref 1 "${S[@]}" --set output.dir="$WORK/ref"
train tp4 4 "${S[@]}" --set parallel.tp=4 --set train.stop_after=4 --set output.dir="$WORK/tp4"
C="$WORK/tp4/checkpoints/step_4"
# the canonical wte: 250 rows, the padded shape only an attribute
h5dump -H -d /model/wte.weight "$C/ckpt.h5" | grep -q "SIMPLE { ( 250, 32 )" \
  || { h5dump -H -d /model/wte.weight "$C/ckpt.h5"; fail "wte.weight is not stored as 250 x 32"; }
h5dump -A -d /model/wte.weight "$C/ckpt.h5" | grep -A4 'ATTRIBUTE "padded_shape"' | grep -q "256, 32" \
  || fail "padded_shape of wte.weight is not 256, 32"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$C" > "$WORK/verify.log" || { cat "$WORK/verify.log"; fail "verify"; }
train b_4to1 1 "${S[@]}" --set train.resume="$C" --set output.dir="$WORK/b_4to1"
train b_4to2 2 "${S[@]}" --set parallel.tp=2 --set train.resume="$C" --set output.dir="$WORK/b_4to2"
python3 "$CMP" "$WORK/ref" "$WORK/b_4to1" "$WORK/b_4to2" --subset --rtol 1e-5
train resave 1 "${S[@]}" --set train.steps=4 --set train.resume="$C" --set output.dir="$WORK/resave"
"$MT_BIN/meshckpt" diff "$C" "$WORK/resave/checkpoints/step_4" | tail -1 | grep -q "^diff: equal" \
  || fail "the tp=4 checkpoint re-saved at tp=1 differs"
echo PASS
