# LEONARDO Booster software environment, sourced by every rendered job script
# (and by hand before building: `source slurm/leonardo/env.sh`).
# Module names change with each software refresh: check `module av` and keep
# them here, in this one file.
module purge >/dev/null 2>&1 || true
module load gcc/12.2.0 cuda/12.2 openmpi/4.1.6--gcc--12.2.0 nccl/2.22.3-1--gcc--12.2.0-cuda-12.2 \
  hdf5/1.14.3--openmpi--4.1.6--gcc--12.2.0 openblas/0.3.24--gcc--12.2.0 cmake
# OpenMPI over UCX on the HDR100 ports; NCCL picks the port next to its GPU
export OMPI_MCA_pml=${OMPI_MCA_pml:-ucx}
export UCX_TLS=${UCX_TLS:-rc,sm,cuda_copy,cuda_ipc}
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}
# OpenMP threads bound to the task's cores and sleeping when idle
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
