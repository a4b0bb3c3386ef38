# Token slices (parallel.pp_token_slices) on the CUDA backend: the key/value
# cache and its gradients in device memory, a slice's attention over the
# cache's blocks. One GPU rank with 4 slices against the CPU's one rank of
# whole sequences within 1e-4 relative at each of 5 steps, and pp 2 with 2
# slices (1f1b) and pp 2 with 4 slices in bf16 on GPUs against the one GPU
# rank (fp32 1e-5; bf16 against the CPU's bf16 run, 2e-2).
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=5 --set train.global_batch=8
   --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
   --set train.micro_batch=2)
train cpu 1 "${C[@]}" --set output.dir="$WORK/cpu"
train one 1 "${C[@]}" --set train.device=cuda --set parallel.pp_token_slices=4 \
  --set output.dir="$WORK/one"
train pp2 2 "${C[@]}" --set train.device=cuda --set parallel.pp=2 \
  --set parallel.pp_token_slices=2 --set output.dir="$WORK/pp2"
train cpu_bf16 1 "${C[@]}" --set train.precision=bf16 --set output.dir="$WORK/cpu_bf16"
train pp2_bf16 2 "${C[@]}" --set train.device=cuda --set parallel.pp=2 \
  --set parallel.pp_token_slices=4 --set train.precision=bf16 --set output.dir="$WORK/pp2_bf16"
python3 "$CMP" "$WORK/cpu" "$WORK/one" --rtol 1e-4 --steps 5
python3 "$CMP" "$WORK/one" "$WORK/pp2" --rtol 1e-5 --steps 5
python3 "$CMP" "$WORK/cpu_bf16" "$WORK/pp2_bf16" --rtol 2e-2 --steps 5
echo PASS
