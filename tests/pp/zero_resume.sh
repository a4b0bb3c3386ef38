# Checkpoints across schedules and ZeRO levels under pipeline parallelism
# (pp 2 x dp 2, tiny with 4 layers): saved after 5 of 10 steps under one
# schedule and ZeRO level, resumed under another; the resumed steps give the
# uninterrupted single-rank loss curve (relative 1e-5, NaN fails). ZB-V
# (rank 0 holds the first and the last virtual stage) saves at ZeRO-1 and
# resumes under interleaved ZeRO-3; zb-h1's ZeRO-3 checkpoint resumes under
# zb-v ZeRO-2.
source "$(dirname "$0")/../ckpt/common_ckpt.sh"
S=(--set train.steps=10 --set model.n_layer=4)
P=(--set parallel.pp=2 --set parallel.dp=2 --set train.micro_batch=1)
train ref 1 "${S[@]}" --set train.micro_batch=8 --set output.dir="$WORK/ref"
train zbz3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=zb-h1 --set parallel.zero=3 \
  --set train.stop_after=5 --set output.dir="$WORK/zbz3"
train gpz2 4 "${S[@]}" "${P[@]}" --set parallel.schedule=gpipe --set parallel.zero=2 \
  --set train.stop_after=5 --set output.dir="$WORK/gpz2"
train zbz3_ilvz2 4 "${S[@]}" "${P[@]}" --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set parallel.zero=2 --set train.resume="$WORK/zbz3/checkpoints" \
  --set output.dir="$WORK/zbz3_ilvz2"
train gpz2_1f1bz3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=1f1b --set parallel.zero=3 \
  --set train.resume="$WORK/gpz2/checkpoints" --set output.dir="$WORK/gpz2_1f1bz3"
train zbvz1 4 "${S[@]}" "${P[@]}" --set parallel.schedule=zb-v --set parallel.virtual_stages=2 \
  --set parallel.zero=1 --set train.stop_after=5 --set output.dir="$WORK/zbvz1"
train zbvz1_ilvz3 4 "${S[@]}" "${P[@]}" --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set parallel.zero=3 --set train.resume="$WORK/zbvz1/checkpoints" \
  --set output.dir="$WORK/zbvz1_ilvz3"
train zbz3_zbvz2 4 "${S[@]}" "${P[@]}" --set parallel.schedule=zb-v --set parallel.virtual_stages=2 \
  --set parallel.zero=2 --set train.resume="$WORK/zbz3/checkpoints" --set output.dir="$WORK/zbz3_zbvz2"
grep -q "resumed from .*(step 5, written by .*pp=2 .*zero=1 " "$WORK/zbvz1_ilvz3.log" \
  || { cat "$WORK/zbvz1_ilvz3.log"; fail "zbvz1_ilvz3 did not resume"; }
for r in zbz3_ilvz2 gpz2_1f1bz3 zbz3_zbvz2; do
  grep -q "resumed from .*(step 5, written by .*pp=2 .*zero=[23] " "$WORK/$r.log" || { cat "$WORK/$r.log"; fail "$r did not resume"; }
done
python3 "$CMP" "$WORK/ref" "$WORK/zbz3" "$WORK/gpz2" "$WORK/zbz3_ilvz2" "$WORK/gpz2_1f1bz3" \
  "$WORK/zbvz1" "$WORK/zbvz1_ilvz3" "$WORK/zbz3_zbvz2" --subset --rtol 1e-5
echo PASS
