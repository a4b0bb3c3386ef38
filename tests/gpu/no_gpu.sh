# train.device = cuda where no GPU can be used (or in a build without CUDA):
# one error line naming the key and the cause, exit 2 on every rank, no
# output touched. Skipped where a GPU is visible (the run would start).
source "$(dirname "$0")/common_gpu.sh"
n=$("$MT_BIN/meshbench" devices | awk '/^gpus / {print $2}')
if [ "${n:-0}" -gt 0 ]; then echo "SKIP: a GPU is visible here: train.device = cuda would run"; exit 77; fi
MT_NAME=cuda_without_gpu bash "$MT_SRC/tests/scripts/expect_fail.sh" cuda 2 \
  "train.device = cuda: (no GPU is usable|this meshtrain was built without CUDA)" \
  --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 \
  --set train.micro_batch=2 --set parallel.dp=2 --set train.device=cuda
