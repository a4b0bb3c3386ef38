# A short tp=2 run with sequence parallelism, dp=2, ZeRO-1, gradient
# accumulation and validation; in the sanitizer build this puts the
# tensor-parallel path under ASan/UBSan.
MT_NAME=tp_smoke
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
mt_mpirun 4 "$MT_BIN/meshtrain" --set model.preset=tiny --set train.steps=3 \
  --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=2 --set parallel.tp=2 \
  --set parallel.sp=true --set parallel.zero=1 --set parallel.bucket_mb=0.01 --set train.eval_every=2 \
  --set data.train="$corpus" --set output.dir="$WORK/run" > "$WORK/log" 2>&1 \
  || { cat "$WORK/log"; fail "training failed"; }
cat "$WORK/log"
[ "$(wc -l < "$WORK/run/metrics.jsonl")" -eq 3 ] || fail "expected 3 metrics lines"
grep -q '"tp_bytes"' "$WORK/run/metrics.jsonl" || fail "metrics lack tp_bytes"
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK/log" || fail "sanitizer report"
echo "PASS: tp=2 sp dp=2 zero=1 smoke run"
