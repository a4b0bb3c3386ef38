# Device memory accounting equals the plan: with train.device = cuda the
# backend's allocations are counted by category like the CPU's, so the
# plan accounting test (tests/zero/plan_accounting.sh) runs unchanged on
# the GPU: every rank's bytes by category and per-step bytes per group
# equal meshtrain --plan-json's.
#   memory.sh [PRESET ...]: tiny and tiny_bf16 (train.precision = bf16: the
#   bf16 tensors on the GPU, the bf16 messages and gradient reductions over
#   NCCL) unless told which
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(tiny tiny_bf16)
for p in "${presets[@]}"; do
  MT_NAME=memory_plan bash "$MT_SRC/tests/zero/plan_accounting.sh" "$p" --set train.device=cuda ||
    fail "plan accounting on the GPU: $p"
done
echo PASS
