# Shared by the checkpoint tests: a tiny model, 10 steps, fixed global batch.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
base=(--set model.preset=tiny --set train.global_batch=8 --set data.train="$corpus"
      --set train.eval_every=0 --set train.warmup_steps=3 --set train.lr=3e-3)
# train NAME NP ARGS... : run meshtrain, fail the test if it fails
train() {
  local name=$1 np=$2; shift 2
  mt_mpirun "$np" "$MT_BIN/meshtrain" "${base[@]}" "$@" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; fail "run $name failed"; }
}
