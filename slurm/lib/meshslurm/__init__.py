"""meshslurm: Slurm job scripts, scaling-study campaigns and a local test
cluster for meshtrain. slurm/meshslurm.py is the command; the parts:

  common    exit codes, errors, parsers shared by the rest
  system    system profiles (slurm/systems/*.ini)
  script    the job script skeleton and its pieces
  checks    what is checked before a job is written (meshtrain --check,
            meshckpt --check, data files)
  render    one job (`render`)
  campaign  sweeps (`campaign`)
  cluster   the local Slurm (`cluster start|status|stop`)
  cli       the command line
"""
