#!/usr/bin/env python3
"""meshslurm: renders meshtrain Slurm job scripts and scaling-study campaigns.

One generator, one skeleton, a system profile per machine (slurm/systems/*.ini):

  meshslurm.py render train --system leonardo-booster --nodes 16 --account A \\
      --config inputs/default.ini --set model.preset=gpt2-124m --run-dir runs/x
  meshslurm.py render bench --system local --ranks 4 --bench "allreduce --max-bytes 64M"
  meshslurm.py render ckpt-convert --system leonardo-booster --nodes 1 --account A \\
      --args "convert runs/x/checkpoints/latest runs/x-tp4 --target tp=4" --run-dir runs/x-convert
  meshslurm.py campaign inputs/sweeps/small-strong-local.ini [--out DIR] [--dry-run] [--submit]
      [--set section.key=value ...]
  meshslurm.py systems
  meshslurm.py modules --system leonardo-booster     (shell code; slurm/leonardo/env.sh uses it)
  meshslurm.py cluster start|status|stop [--dir DIR] (a local Slurm on this machine)

Every rendered script: #SBATCH directives from the profile (partition, QoS by
node count and walltime, account, tasks/GPUs/CPUs per node, memory, exclusive
where the QoS allows), --signal=B:USR1@S, --requeue, --open-mode=append,
output in its run directory, the profile's modules (each checked: one that
does not load fails the job at once, naming it), its env file and TMPDIR, and
a trap that forwards USR1/TERM to the application (started in the background
so the trap runs at once). An application exit code of 75 (a checkpoint
written after USR1: preempted or near the walltime) requeues the job with
`scontrol requeue`, and the restarted job passes --set train.resume=auto; 76
(a checkpoint written after TERM: scancel) ends it for good, with the status
"cancelled after a checkpoint at step N". A job is written only after its
checks pass (meshslurm/checks.py): a train job's configuration for its rank
count (meshtrain --check) and data files (they exist, their token ids fit the
vocabulary), a ckpt-convert job's arguments and checkpoint (meshckpt --check).

Python 3 standard library only. Exit codes: 0, 2 bad input, 3 runtime,
77 cannot run here (cluster start without Slurm or root).
"""
import os
import sys

# the package beside this file: slurm/lib/meshslurm/ (no __pycache__ written
# into the source tree: it may be read-only, and the local cluster's test
# holds the command to writing nothing outside the cluster's directory)
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from meshslurm.cli import run  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
