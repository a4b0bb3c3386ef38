# Every parameter gradient of the tensor-parallel model (with and without
# sequence parallelism) against the unsplit model, on 2 and 4 tp ranks; see
# tp_grad_check.c for what is checked and the tolerances.
MT_NAME=tp_grad_check
source "$(dirname "$0")/../scripts/common.sh"
mt_test_program tp_grad_check 2 4
