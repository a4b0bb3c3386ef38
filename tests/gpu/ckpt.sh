# Checkpoints between devices (the format does not change): 5 steps on the
# GPU, resumed on the CPU for steps 6..10, and 5 on the CPU resumed on the
# GPU, both continue the uninterrupted CPU curve within 1e-4 relative;
# meshckpt verify passes on a GPU-written checkpoint.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
   --set train.micro_batch=4 --set data.train="$corpus" --set train.eval_every=0)
train ref 1 "${C[@]}" --set ckpt.mode=none --set output.dir="$WORK/ref"
train g5 1 "${C[@]}" --set train.device=cuda --set train.stop_after=5 --set output.dir="$WORK/g2c"
train c10 1 "${C[@]}" --set train.resume=auto --set output.dir="$WORK/g2c"
grep -q "resumed from .*step_5" "$WORK/c10.log" || fail "the CPU run did not resume from step 5"
train c5 1 "${C[@]}" --set train.stop_after=5 --set output.dir="$WORK/c2g"
train g10 1 "${C[@]}" --set train.device=cuda --set train.resume=auto --set output.dir="$WORK/c2g"
grep -q "resumed from .*step_5" "$WORK/g10.log" || fail "the GPU run did not resume from step 5"
python3 "$CMP" "$WORK/ref" "$WORK/g2c" "$WORK/c2g" --rtol 1e-4 --steps 10
mt_mpirun 1 "$MT_BIN/meshckpt" verify "$WORK/g2c/checkpoints/step_5" --deep ||
  fail "verify of the GPU-written checkpoint"
echo PASS
