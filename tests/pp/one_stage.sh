# One pipeline stage (parallel.pp = 1) runs its micro-batches in order in
# one chunk, whatever parallel.schedule and virtual_stages say: interleaved,
# breadth-first and zb-v with virtual_stages = 2 at pp = 1 give the losses
# of the plain single-rank run (relative 1e-5, NaN fails), --check accepts
# them, and a zb-v checkpoint (pp 2) resumed at pp = 1 with the schedule
# left in the configuration continues the same curve.
source "$(dirname "$0")/../ckpt/common_ckpt.sh"
S=(--set train.steps=6 --set model.n_layer=4 --set train.micro_batch=2)
train ref 1 "${S[@]}" --set output.dir="$WORK/ref" --set ckpt.mode=none
for sched in interleaved breadth-first zb-v; do
  V=(--set parallel.schedule=$sched --set parallel.virtual_stages=2)
  "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" "${V[@]}" --check --ranks 1 > "$WORK/check_$sched.log" 2>&1 \
    || { cat "$WORK/check_$sched.log"; fail "--check refused $sched at pp = 1"; }
  train "one_$sched" 1 "${S[@]}" "${V[@]}" --set ckpt.mode=none --set output.dir="$WORK/one_$sched"
  grep -q "virtual_stages = 2 and parallel.schedule = $sched have no effect at parallel.pp = 1" \
    "$WORK/one_$sched.log" || { cat "$WORK/one_$sched.log"; fail "no note for $sched at pp = 1"; }
done
ZBV=(--set parallel.schedule=zb-v --set parallel.virtual_stages=2)
train zbv 2 "${S[@]}" "${ZBV[@]}" --set parallel.pp=2 --set train.stop_after=3 \
  --set output.dir="$WORK/zbv"
train zbv_pp1 1 "${S[@]}" "${ZBV[@]}" --set train.resume="$WORK/zbv/checkpoints" \
  --set output.dir="$WORK/zbv_pp1"
grep -q "resumed from .*(step 3, written by .*pp=2 " "$WORK/zbv_pp1.log" \
  || { cat "$WORK/zbv_pp1.log"; fail "zbv_pp1 did not resume"; }
python3 "$CMP" "$WORK/ref" "$WORK/one_interleaved" "$WORK/one_breadth-first" "$WORK/one_zb-v" \
  --rtol 1e-5 --steps 6
python3 "$CMP" "$WORK/ref" "$WORK/zbv" "$WORK/zbv_pp1" --subset --rtol 1e-5
echo PASS
