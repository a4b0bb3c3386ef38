# A short run of each context-parallel mode with evaluation, a checkpoint and
# a resume under the other mode, with documents balanced by FLOPs: labelled
# "sanitize", so the ASan/UBSan build runs the ring (non-blocking K/V and
# dK/dV passing), the all-to-alls, and the documents' staging and plan;
# then data.seq_policy = varlen under each mode (its plan, padding, the
# exchange skipped for micro-batches whose documents stay in their chunks,
# a varying number of micro-batches).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
common=(--set model.preset=tiny --set train.steps=4 --set train.global_batch=4
        --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=2
        --set train.eval_batches=1 --set output.dir="$WORK/run"
        --set data.documents=true --set data.eot=10 --set data.balance=flops)
mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.cp=2 --set parallel.zero=1 \
  --set train.stop_after=2 > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fail "ring run"; }
mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.cp=2 --set parallel.cp_mode=ulysses \
  --set train.resume=auto > "$WORK/b.log" 2>&1 || { cat "$WORK/b.log"; fail "ulysses resume"; }
grep -q "resumed from .*step_2" "$WORK/b.log" || fail "no resume"
for mode in ring ulysses; do
  mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.cp=2 --set parallel.cp_mode=$mode \
    --set data.balance=none --set data.seq_policy=varlen --set data.long_documents=split \
    --set ckpt.mode=none --set train.steps=2 --set output.dir="$WORK/varlen_$mode" \
    > "$WORK/varlen_$mode.log" 2>&1 || { cat "$WORK/varlen_$mode.log"; fail "varlen $mode"; }
done
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK"/*.log || fail "sanitizer report"
echo PASS
