# Environment for the local cluster (meshslurm.py cluster start): Debian's
# OpenMPI 4.1 as root, ranks of two emulated nodes on one host.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shared memory between emulated nodes crashes; single-copy needs ptrace here
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
# Open MPI picks its transport itself (the tests name ob1 for mpirun: not here)
unset OMPI_MCA_pml
export OMP_WAIT_POLICY=passive
# PMIx's shared-memory job-data store (gds ds21/shmem) has known
# intermittent segfaults in MPI_Init under srun (openpmix issue 1114, Open
# MPI issue 12495, both worked around this way); the rank crashes at
# address 0 in its first second with no frame of ours, as an attempt of
# slurm.preempt_twice did here. The hash store keeps job data per process.
export PMIX_MCA_gds=hash
# the OpenBLAS kernel choice of apps/scripts/env.sh (needs MT_SRC, MT_BIN)
if [ -n "${MT_SRC:-}" ] && [ -f "$MT_SRC/apps/scripts/env.sh" ]; then
  # shellcheck disable=SC1091
  source "$MT_SRC/apps/scripts/env.sh" "$(dirname "$MT_BIN")" >/dev/null
fi
