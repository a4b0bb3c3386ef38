# A checkpoint of aux-loss-free balancing (train.moe_balance = bias) resumed
# under train.moe_balance = aux routes without the saved bias: rank 0 says
# so once (the method may change, the routing must not change unannounced);
# resumed under bias, it keeps the bias and says nothing of it.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
C=(--set model.preset=tiny --set model.moe_experts=4 --set data.train="$corpus"
   --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0
   --set parallel.dp=2 --set output.dir="$WORK/run")
mt_train bias 2 "${C[@]}" --set train.moe_balance=bias --set train.steps=3
cp -r "$WORK/run" "$WORK/run_bias"
mt_train aux 2 "${C[@]}" --set train.moe_balance=aux --set train.steps=5 --set train.resume=auto
[ "$(grep -c "warning: .*step_3 holds the MoE routing bias of aux-loss-free balancing; train.moe_balance = aux routes without it" "$WORK/aux.log")" -eq 1 ] \
  || { cat "$WORK/aux.log"; fail "no single warning that the saved bias is left out"; }
rm -rf "$WORK/run"; mv "$WORK/run_bias" "$WORK/run"
mt_train keep 2 "${C[@]}" --set train.moe_balance=bias --set train.steps=5 --set train.resume=auto
grep -q "resumed from .*step_3" "$WORK/keep.log" || { cat "$WORK/keep.log"; fail "keep did not resume"; }
! grep -q "routing bias" "$WORK/keep.log" || { cat "$WORK/keep.log"; fail "a note on the bias when it is kept"; }
echo PASS
