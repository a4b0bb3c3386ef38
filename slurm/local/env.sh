# Environment for the local cluster (meshslurm.py cluster start): Debian's
# OpenMPI 4.1 as root, ranks of two emulated nodes on one host.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shared memory between emulated nodes crashes; single-copy needs ptrace here
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
# both emulated nodes are this host: TCP over loopback. Over the host's own
# external address a connect now and then fails under load, and OpenMPI 4.1's
# TCP transport then crashes the rank (exit 139) at start or at its first
# message to that peer.
export OMPI_MCA_btl_tcp_if_include=lo
export OMP_WAIT_POLICY=passive
# the OpenBLAS kernel choice of apps/scripts/env.sh (needs MT_SRC, MT_BIN)
if [ -n "${MT_SRC:-}" ] && [ -f "$MT_SRC/apps/scripts/env.sh" ]; then
  # shellcheck disable=SC1091
  source "$MT_SRC/apps/scripts/env.sh" "$(dirname "$MT_BIN")" >/dev/null
fi
