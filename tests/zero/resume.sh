# Checkpoints are universal across ZeRO levels: a run saved at step 5 under
# one level (and layout) and resumed under another continues the
# uninterrupted curve within a relative 1e-5: zero 3 -> 0, 0 -> 3 (dp 2 ->
# 4), 2 -> 1, and (tp 2 with sp, zero 3) -> (pp 2, zero 1). Resumed under
# the same layout it is bitwise the uninterrupted run (zero 2 and 3).
source "$(dirname "$0")/../ckpt/common_ckpt.sh"
S=(--set train.steps=10)
train ref 1 "${S[@]}" --set train.micro_batch=4 --set output.dir="$WORK/ref"
# saved at step 5 under A
train a_z3 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2 \
  --set train.stop_after=5 --set output.dir="$WORK/a_z3"
train a_z0 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=4 \
  --set train.stop_after=5 --set output.dir="$WORK/a_z0"
train a_z2 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1 \
  --set train.stop_after=5 --set output.dir="$WORK/a_z2"
train a_tp 4 "${S[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true \
  --set parallel.zero=3 --set train.micro_batch=2 --set train.stop_after=5 --set output.dir="$WORK/a_tp"
# resumed under B
train b_z3to0 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2 \
  --set train.resume="$WORK/a_z3/checkpoints" --set output.dir="$WORK/b_z3to0"
train b_z0to3 4 "${S[@]}" --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=1 \
  --set train.resume="$WORK/a_z0/checkpoints" --set output.dir="$WORK/b_z0to3"
train b_z2to1 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.resume="$WORK/a_z2/checkpoints" --set output.dir="$WORK/b_z2to1"
train b_tptopp 4 "${S[@]}" --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=1 \
  --set train.micro_batch=1 --set train.resume="$WORK/a_tp/checkpoints" --set output.dir="$WORK/b_tptopp"
python3 "$CMP" "$WORK/ref" "$WORK/b_z3to0" "$WORK/b_z0to3" "$WORK/b_z2to1" "$WORK/b_tptopp" \
  --subset --rtol 1e-5
for d in b_z3to0 b_z0to3 b_z2to1 b_tptopp; do
  grep -q "resumed from .*step_5" "$WORK/$d.log" || fail "$d did not resume from step 5"
  n=$(wc -l < "$WORK/$d/metrics.jsonl"); [ "$n" -eq 5 ] || fail "$d ran $n steps, expected 5 (6..10)"
done
# the same layout: bitwise
for z in 2 3; do
  mb=$([ $z = 2 ] && echo 1 || echo 2)
  train u_z$z 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=$z --set train.micro_batch=$mb \
    --set output.dir="$WORK/u_z$z"
  train r_z$z 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=$z --set train.micro_batch=$mb \
    --set train.resume=auto --set output.dir="$WORK/a_z$z"
  python3 "$CMP" "$WORK/u_z$z" "$WORK/a_z$z" --bitwise --steps 10
done
echo PASS
