# A short run of issue 14's code for the sanitizer build (tests/run.sh runs
# label "sanitize" under ASan/UBSan): convert (bf16, parameters only, a
# target layout, both modes) on 2 ranks, verify, Hugging Face export and
# import, a run started from the import, a per-writer load at 2 ranks.
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
train src 2 --set train.steps=2 --set parallel.dp=2 --set train.micro_batch=4 --set ckpt.mode=per-writer \
  --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_2"
mt_mpirun 2 "$M" convert "$SRC" "$WORK/a" --mode shared --dtype bf16 --target tp=2,pp=2 > /dev/null || fail "convert a"
mt_mpirun 2 "$M" convert "$WORK/a/step_2" "$WORK/b" --mode per-writer --dtype fp32 --params-only > /dev/null || fail "convert b"
mt_mpirun 2 "$M" verify "$WORK/b/step_2" > /dev/null || fail "verify b"
mt_mpirun 2 "$M" export "$WORK/b/step_2" "$WORK/hf" --format hf > /dev/null || fail "export"
mt_mpirun 1 "$M" import "$WORK/hf" "$WORK/imp" --format hf > /dev/null || fail "import"
train init 2 --set train.steps=1 --set parallel.dp=2 --set train.micro_batch=4 --set train.init_from="$WORK/imp" \
  --set output.dir="$WORK/init"
train resumed 2 --set train.steps=3 --set parallel.dp=2 --set train.micro_batch=4 --set train.resume="$SRC" \
  --set output.dir="$WORK/resumed"
echo PASS
