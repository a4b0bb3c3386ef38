# Every parameter gradient of the tensor-parallel model (with and without
# sequence parallelism) against the unsplit model, on 2 and 4 tp ranks; see
# tp_grad_check.c for what is checked and the tolerances.
MT_NAME=tp_grad_check
source "$(dirname "$0")/../scripts/common.sh"
for np in 2 4; do
  mt_mpirun "$np" "$MT_TESTBIN/tp_grad_check" > "$WORK/tp$np.log" 2>&1 \
    || { cat "$WORK/tp$np.log"; fail "tp_grad_check on $np ranks"; }
  cat "$WORK/tp$np.log"
done
