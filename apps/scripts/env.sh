# Sourced by the run and test scripts after the build (needs build/bin/meshbench).
#   source apps/scripts/env.sh BUILD_DIR
# 1. OpenMP threads sleep while they wait: ranks often share cores (tests and
#    the demo oversubscribe), and spinning workers steal them from MPI.
# 2. An OpenBLAS that does not know this CPU falls back to its generic
#    "Prescott" kernels, 5-6x slower than the AVX2/AVX-512 ones the CPU has.
#    Then pick the right kernels by the CPU's flags. A value the user set is
#    always kept.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "${1:-build}/bin/meshbench" ]; then
  core=$("${1:-build}/bin/meshbench" info 2>/dev/null | awk '/^blas_core/ {print $2}')
  if [ "$core" = "Prescott" ] || [ "$core" = "prescott" ]; then
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
    if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then
      export OPENBLAS_CORETYPE=SkylakeX
    elif has avx2 && has fma; then
      export OPENBLAS_CORETYPE=Haswell
    fi
    [ -n "${OPENBLAS_CORETYPE:-}" ] &&
      echo "env: OpenBLAS fell back to generic kernels on this CPU; using OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
  fi
fi
