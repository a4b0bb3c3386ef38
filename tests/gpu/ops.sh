# The ops of the CUDA backend against the CPU backend, PROGRAM = gpu_ops
# (every op, gpu_ops.c), gpu_moe_ops (the Mixture-of-Experts ops,
# gpu_moe_ops.c), gpu_edges or gpu_ops_bf16 (the ops on bf16 storage): fp32,
# bf16, bf16 with 1 MiB of scratch (products and attention in pieces), and
# bf16 rounded inside cuBLASLt (MT_CUDA_BF16_GEMM=fast); or only the runs
# named after PROGRAM (fp32 bf16 bf16_small_scratch bf16_fast).
PROGRAM=$1 MT_SUFFIX=$1
RUNS=("${@:2}")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(fp32 bf16 bf16_small_scratch bf16_fast)
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
run() { # NAME PRECISION [VAR=VALUE...]
  local name=$1 prec=$2; shift 2
  set +e
  env "$@" "$MT_MPIEXEC" -n 1 "$MT_TESTBIN/$PROGRAM" "$prec" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  cat "$WORK/$name.log"
  [ $rc -eq 0 ] || fail "$PROGRAM $name (exit $rc)"
}
for r in "${RUNS[@]}"; do
  case $r in
    fp32) run fp32 fp32 ;;
    bf16) run bf16 bf16 ;;
    bf16_small_scratch) run bf16_small_scratch bf16 MT_CUDA_SCRATCH_MB=1 ;;
    bf16_fast) run bf16_fast bf16 MT_CUDA_BF16_GEMM=fast ;;
    *) fail "ops.sh: no run named $r" ;;
  esac
done
echo PASS
