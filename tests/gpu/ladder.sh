# The ladder residual on the CUDA backend (model.residual = ladder): its
# non-blocking sums over tp (all-reduce; under sp a reduce-scatter) on
# device buffers, staged or over NCCL. One GPU rank against the CPU's one
# rank within 1e-4 relative at each of 5 steps, and tp 2 and tp 2 + sp on
# GPUs against the one GPU rank within 1e-5 (pp: tests/model/ladder_*.sh).
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=5 --set train.global_batch=8
   --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
   --set model.residual=ladder --set train.micro_batch=2)
train cpu 1 "${C[@]}" --set output.dir="$WORK/cpu"
train one 1 "${C[@]}" --set train.device=cuda --set output.dir="$WORK/one"
train tp2 2 "${C[@]}" --set train.device=cuda --set parallel.tp=2 --set output.dir="$WORK/tp2"
train tp2sp 2 "${C[@]}" --set train.device=cuda --set parallel.tp=2 --set parallel.sp=true \
  --set output.dir="$WORK/tp2sp"
python3 "$CMP" "$WORK/cpu" "$WORK/one" --rtol 1e-4 --steps 5
python3 "$CMP" "$WORK/one" "$WORK/tp2" "$WORK/tp2sp" --rtol 1e-5 --steps 5
echo PASS
