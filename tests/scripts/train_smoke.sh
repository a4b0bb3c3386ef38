# A short data-parallel ZeRO-1 run with gradient accumulation and validation;
# in the sanitizer build this puts the whole training path under ASan/UBSan.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
mt_mpirun 2 "$MT_BIN/meshtrain" --set model.preset=tiny --set train.steps=4 \
  --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=2 --set parallel.zero=1 \
  --set parallel.bucket_mb=0.01 --set train.eval_every=2 --set data.train="$corpus" \
  --set output.dir="$WORK/run" --set output.save_params=true > "$WORK/log" 2>&1 \
  || { cat "$WORK/log"; fail "training failed"; }
cat "$WORK/log"
[ "$(wc -l < "$WORK/run/metrics.jsonl")" -eq 4 ] || fail "expected 4 metrics lines"
for f in summary.json config.ini params.f32; do [ -s "$WORK/run/$f" ] || fail "missing $f"; done
# the resolved config loads back and reproduces the run's first loss exactly
mt_mpirun 2 "$MT_BIN/meshtrain" "$WORK/run/config.ini" --set output.dir="$WORK/again" \
  --set train.steps=1 --set train.eval_every=0 > "$WORK/log2" 2>&1 || { cat "$WORK/log2"; fail "rerun from config.ini failed"; }
# (as a number: the same float64 bits; a null loss fails)
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/run" "$WORK/again" --bitwise --subset \
  || fail "config.ini does not reproduce the run's first loss"
a=$(head -1 "$WORK/run/metrics.jsonl" | grep -o '"loss":[^,]*')
# resume (load path), then asynchronous per-writer saves, then meshckpt
mt_mpirun 2 "$MT_BIN/meshtrain" "$WORK/run/config.ini" --set train.resume=auto --set train.steps=6 \
  --set ckpt.mode=per-writer --set ckpt.async=true --set ckpt.every=1 > "$WORK/log3" 2>&1 \
  || { cat "$WORK/log3"; fail "resume with async per-writer saves failed"; }
grep -q "resumed from .*step_4" "$WORK/log3" || { cat "$WORK/log3"; fail "did not resume from step_4"; }
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" --deep || fail "meshckpt verify"
mt_mpirun 1 "$MT_BIN/meshckpt" diff "$WORK/run/checkpoints/step_6" "$WORK/run/checkpoints/step_6" > /dev/null || fail "meshckpt diff"
echo "PASS: first loss $a reproduced from config.ini; resumed and saved asynchronously"
