# Software environment for the `generic` system profile, sourced by every
# rendered job script. Put your cluster's `module load` line here.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
