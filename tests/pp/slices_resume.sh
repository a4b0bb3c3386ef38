# Token slices and checkpoints, at pp 2 x dp 2 (tiny, 4 layers): a run with
# slices saved after 5 of 10 steps resumes without them, and a run without
# slices resumes with them, under ZeRO 2 and 3 (whose reductions and gathers
# go per slice); the resumed steps give the uninterrupted single-rank loss
# curve (relative 1e-5, NaN fails).
source "$(dirname "$0")/../ckpt/common_ckpt.sh"
S=(--set train.steps=10 --set model.n_layer=4)
P=(--set parallel.pp=2 --set parallel.dp=2 --set train.micro_batch=1)
train ref 1 "${S[@]}" --set train.micro_batch=8 --set output.dir="$WORK/ref"
train k4z2 4 "${S[@]}" "${P[@]}" --set parallel.schedule=1f1b --set parallel.zero=2 \
  --set parallel.pp_token_slices=4 --set train.stop_after=5 --set output.dir="$WORK/k4z2"
train k1z3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=1f1b --set parallel.zero=3 \
  --set train.stop_after=5 --set output.dir="$WORK/k1z3"
train k4z2_k1z3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=1f1b --set parallel.zero=3 \
  --set train.resume="$WORK/k4z2/checkpoints" --set output.dir="$WORK/k4z2_k1z3"
train k1z3_k2z3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set parallel.zero=3 --set parallel.pp_token_slices=2 \
  --set train.resume="$WORK/k1z3/checkpoints" --set output.dir="$WORK/k1z3_k2z3"
for r in k4z2_k1z3 k1z3_k2z3; do
  grep -q "resumed from .*(step 5, written by .*pp=2 " "$WORK/$r.log" \
    || { cat "$WORK/$r.log"; fail "$r did not resume"; }
done
python3 "$CMP" "$WORK/ref" "$WORK/k4z2" "$WORK/k1z3" "$WORK/k4z2_k1z3" "$WORK/k1z3_k2z3" \
  --subset --rtol 1e-5
echo PASS
