# Checkpoints move between cp layouts (the parameters are the same on every
# cp rank; ZeRO shards the state over dp x cp): saved at step 5 under
#   ring cp = 2 (ZeRO-1)               resumed at cp = 1
#   cp = 1                             resumed under Ulysses cp = 2 with ZeRO-3
#   Ulysses cp = 2 x dp = 2 (ZeRO-2)   resumed under ring cp = 2 with tp = 2 and sp (ZeRO-1)
# each continues the uninterrupted one-rank curve within a relative 1e-5 over
# steps 6..10, and the cp = 2 checkpoint passes meshckpt verify.
source "$(dirname "$0")/../ckpt/common_ckpt.sh"
S=(--set train.steps=10 --set train.micro_batch=2)
train ref 1 "${S[@]}" --set output.dir="$WORK/ref"
train a_ring2 2 "${S[@]}" --set parallel.cp=2 --set parallel.zero=1 --set train.stop_after=5 \
  --set output.dir="$WORK/a_ring2"
train a_cp1 1 "${S[@]}" --set train.stop_after=5 --set output.dir="$WORK/a_cp1"
train a_uly 4 --set train.steps=10 --set train.micro_batch=1 --set parallel.cp=2 \
  --set parallel.cp_mode=ulysses --set parallel.dp=2 --set parallel.zero=2 --set train.stop_after=5 \
  --set output.dir="$WORK/a_uly"
"$MT_BIN/meshckpt" verify "$WORK/a_ring2/checkpoints/step_5" > "$WORK/verify.log" 2>&1 \
  || { cat "$WORK/verify.log"; fail "the cp = 2 checkpoint does not verify"; }
train b_ring2to1 1 "${S[@]}" --set train.resume="$WORK/a_ring2/checkpoints" \
  --set output.dir="$WORK/b_ring2to1"
train b_1touly2 2 "${S[@]}" --set parallel.cp=2 --set parallel.cp_mode=ulysses --set parallel.zero=3 \
  --set train.resume="$WORK/a_cp1/checkpoints" --set output.dir="$WORK/b_1touly2"
train b_ulytoring 4 "${S[@]}" --set parallel.cp=2 --set parallel.tp=2 --set parallel.sp=true \
  --set parallel.zero=1 --set train.resume="$WORK/a_uly/checkpoints" --set output.dir="$WORK/b_ulytoring"
python3 "$CMP" "$WORK/ref" "$WORK/b_ring2to1" "$WORK/b_1touly2" "$WORK/b_ulytoring" --subset --rtol 1e-5
for d in b_ring2to1 b_1touly2 b_ulytoring; do
  grep -q "resumed from .*step_5" "$WORK/$d.log" || fail "$d did not resume from step 5"
  n=$(wc -l < "$WORK/$d/metrics.jsonl"); [ "$n" -eq 5 ] || fail "$d ran $n steps, expected 5 (6..10)"
done
grep -q "written by dp=1 tp=1 pp=1 cp=2" "$WORK/b_ring2to1.log" || fail "the log does not name cp = 2"
echo PASS
