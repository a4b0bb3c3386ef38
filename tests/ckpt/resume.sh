# Save under layout A, resume under layout B, continue: the losses equal the
# uninterrupted run (bitwise for A = B, relative 1e-5 otherwise). Then load
# under B and save again: meshckpt diff says equal to the original.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=10)
train ref_dp1 1 "${S[@]}" --set parallel.dp=1 --set train.micro_batch=4 --set output.dir="$WORK/ref_dp1"
train ref_dp2z 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 \
  --set output.dir="$WORK/ref_dp2z"

# same layout, interrupted at step 5 and resumed in place: bitwise
train same_a 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.stop_after=5 --set output.dir="$WORK/same"
train same_b 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.resume=auto --set output.dir="$WORK/same"
grep -q "resumed from .*step_5" "$WORK/same_b.log" || fail "same-layout run did not resume from step 5"
python3 "$CMP" "$WORK/ref_dp2z" "$WORK/same" --bitwise --steps 10

# dp 4 (ZeRO-1) -> dp 2 (no ZeRO), dp 2 (no ZeRO) -> dp 4 (ZeRO-1), dp 4 -> 1 rank
train a4 4 "${S[@]}" --set parallel.dp=4 --set parallel.zero=1 --set train.micro_batch=1 \
  --set train.stop_after=5 --set output.dir="$WORK/a4"
train a2 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=4 \
  --set train.stop_after=5 --set output.dir="$WORK/a2"
train b_4to2 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2 \
  --set train.resume="$WORK/a4/checkpoints" --set output.dir="$WORK/b_4to2"
train b_2to4 4 "${S[@]}" --set parallel.dp=4 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.resume="$WORK/a2/checkpoints/step_5" --set output.dir="$WORK/b_2to4"
train b_4to1 1 "${S[@]}" --set parallel.dp=1 --set train.micro_batch=8 \
  --set train.resume="$WORK/a4/checkpoints/step_5" --set output.dir="$WORK/b_4to1"
python3 "$CMP" "$WORK/ref_dp1" "$WORK/b_4to2" "$WORK/b_2to4" "$WORK/b_4to1" --subset --rtol 1e-5
for d in b_4to2 b_2to4 b_4to1; do
  n=$(wc -l < "$WORK/$d/metrics.jsonl"); [ "$n" -eq 5 ] || fail "$d ran $n steps, expected 5 (6..10)"
done

# load under another layout, save again without training: the same tensors
train resave 4 --set train.steps=5 --set parallel.dp=4 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.resume="$WORK/a2/checkpoints/step_5" --set output.dir="$WORK/resave"
"$MT_BIN/meshckpt" diff "$WORK/a2/checkpoints/step_5" "$WORK/resave/checkpoints/step_5" | tee "$WORK/diff.log"
grep -q "^diff: equal" "$WORK/diff.log" || fail "re-saved checkpoint differs from the original"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/resave/checkpoints" --deep || fail "verify of the re-saved checkpoint"
echo PASS
