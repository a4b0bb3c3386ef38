# A short run of issue 14's code for the sanitizer build (tests/run.sh runs
# label "sanitize" under ASan/UBSan): convert (bf16, parameters only, a
# target layout; per-writer in, shared out) on 2 ranks, verify, Hugging
# Face export and import, a run started from the import (a per-writer
# parameters-only load at 2 ranks).
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
train src 2 --set train.steps=2 --set parallel.dp=2 --set train.micro_batch=4 --set ckpt.mode=per-writer \
  --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_2"
mt_mpirun 2 "$M" convert "$SRC" "$WORK/b" --mode shared --dtype bf16 --params-only \
  --target tp=2,pp=2 > /dev/null || fail "convert"
mt_mpirun 2 "$M" verify "$WORK/b/step_2" > /dev/null || fail "verify"
mt_mpirun 1 "$M" export "$WORK/b/step_2" "$WORK/hf" --format hf > /dev/null || fail "export"
mt_mpirun 1 "$M" import "$WORK/hf" "$WORK/imp" --format hf > /dev/null || fail "import"
train init 2 --set train.steps=1 --set parallel.dp=2 --set train.micro_batch=4 --set train.init_from="$WORK/imp" \
  --set output.dir="$WORK/init"
echo PASS
