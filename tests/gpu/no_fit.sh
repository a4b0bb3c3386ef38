# A layout that does not fit the GPU is refused before training: one line
# naming the memory per rank, the GPU and what to change; exit 2, no output.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
MT_NAME=no_fit_run bash "$MT_SRC/tests/scripts/expect_fail.sh" no_fit 1 \
  "needs .* GiB of GPU memory per rank .* lower train.micro_batch" \
  --set model.preset=gpt2-124m --set data.train=@CORPUS@ --set train.global_batch=4096 \
  --set train.micro_batch=4096 --set train.device=cuda
