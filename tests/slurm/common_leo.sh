# A LEONARDO login shell for the Slurm tests that render its jobs (sourced
# after scripts/common.sh): $WORK and $CINECA_SCRATCH of their own (the
# profile's data_root, $WORK/meshtrain, holds the default corpus), and
# NODEV, the profile's GPU device (cuda, bf16) off where this build has no
# CUDA, and PROFILE_SETS, the keys the profile then gives a job (meshplan
# prices a job in its own device and precision: the same sets make the same
# figure).
export WORK="$WORK/leo-work" CINECA_SCRATCH="$WORK/leo-scratch"
mkdir -p "$WORK/meshtrain/inputs/data" "$CINECA_SCRATCH"
"$MT_BIN/meshdata" corpus "$WORK/meshtrain/inputs/data/corpus.txt" --bytes 100K > /dev/null
NODEV=()
PROFILE_SETS=(--set train.device=cuda --set train.precision=bf16)
if "$MT_BIN/meshbench" devices | grep -q "^cuda_built 0"; then
  NODEV=(--profile-set device= --profile-set precision=)
  PROFILE_SETS=()
fi
