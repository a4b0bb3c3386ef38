# Shared by the checkpoint tests: a tiny model, 10 steps, fixed global batch.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
base=(--set model.preset=tiny --set train.global_batch=8 --set data.train="$corpus"
      --set train.eval_every=0 --set train.warmup_steps=3 --set train.lr=3e-3)
# train NAME NP ARGS... : run meshtrain, fail the test if it fails
train() { mt_train "$1" "$2" "${base[@]}" "${@:3}"; }
# ckpt_mode MODE: the settings of a save mode (shared, per-writer, or async:
# per-writer, written in the background) in the array M
ckpt_mode() {
  case $1 in
    shared) M=(--set ckpt.mode=shared) ;;
    per-writer) M=(--set ckpt.mode=per-writer) ;;
    async) M=(--set ckpt.mode=per-writer --set ckpt.async=true) ;;
    *) fail "unknown mode $1" ;;
  esac
}
# hf_refused NP NAME REGEX: meshckpt import of the Hugging Face directory
# $WORK/NAME on NP ranks is refused: exit 2, one error line, matching REGEX,
# and no checkpoint written
hf_refused() {
  local np=$1 name=$2 re=$3 rc=0
  mt_mpirun "$np" "$MT_BIN/meshckpt" import "$WORK/$name" "$WORK/out_$name" --format hf \
    > "$WORK/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: rc $rc, want one line matching /$re/"; }
  [ ! -e "$WORK/out_$name/step_0" ] || fail "$name: a checkpoint was written"
  echo "ok   $name: $(grep error: "$WORK/$name.log")"
}
