# run_one.sh PROGRAM PRECISION [ARGS...]: one run of gpu_ops or gpu_moe_ops
# on the emulated GPU (the AddressSanitizer build's pass over every op).
PROGRAM=$1 PREC=$2 MT_SUFFIX=$1-$2
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
mt_mpirun 1 "$MT_TESTBIN/$PROGRAM" "$PREC" "${@:3}" > "$WORK/run.log" 2>&1 ||
  { tail -40 "$WORK/run.log"; fail "$PROGRAM $PREC"; }
tail -1 "$WORK/run.log"
echo PASS
