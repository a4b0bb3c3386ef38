# LEONARDO Booster software environment, sourced by every rendered job script
# and by hand on a login node before building: `source slurm/leonardo/env.sh`.
# The module names live in the system profile (slurm/systems/leonardo-booster.ini,
# [modules]); a job loads them, each checked, before it sources this file. By
# hand, this file loads them itself and stops at the first that fails.
if [ -z "${MT_MODULES_LOADED:-}" ]; then
  eval "$(python3 "$(dirname "${BASH_SOURCE[0]}")/../meshslurm.py" modules --system leonardo-booster)" ||
    return 1
fi
# OpenMPI over UCX on the HDR100 ports; NCCL picks the port next to its GPU
export OMPI_MCA_pml=${OMPI_MCA_pml:-ucx}
export UCX_TLS=${UCX_TLS:-rc,sm,cuda_copy,cuda_ipc}
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}
# OpenMP threads bound to the task's cores and sleeping when idle
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
