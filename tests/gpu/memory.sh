# Device memory accounting equals the plan: with train.device = cuda the
# backend's allocations are counted by category like the CPU's, so the
# plan accounting test (tests/zero/plan_accounting.sh) runs unchanged on
# the GPU: every rank's bytes by category and per-step bytes per group
# equal meshtrain --plan-json's.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
MT_NAME=memory_plan bash "$MT_SRC/tests/zero/plan_accounting.sh" tiny --set train.device=cuda
