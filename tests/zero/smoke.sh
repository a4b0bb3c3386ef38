# A short ZeRO-3 run with evaluation and a checkpoint, resumed under ZeRO-2
# with sequence parallelism over tp = 2: labelled "sanitize", so the
# ASan/UBSan build runs the new state engine (gathers, prefetch, gradient
# buffers, shards) too.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
common=(--set model.preset=tiny --set train.steps=6 --set train.global_batch=8
        --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=3
        --set train.eval_batches=1 --set output.dir="$WORK/run")
mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.dp=2 --set parallel.zero=3 \
  --set train.stop_after=3 > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fail "zero 3 run"; }
mt_mpirun 4 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.dp=2 --set parallel.tp=2 \
  --set parallel.sp=true --set parallel.zero=2 --set train.resume=auto > "$WORK/b.log" 2>&1 \
  || { cat "$WORK/b.log"; fail "zero 2 resume"; }
grep -q "resumed from .*step_3" "$WORK/b.log" || fail "no resume"
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK"/*.log || fail "sanitizer report"
echo PASS
