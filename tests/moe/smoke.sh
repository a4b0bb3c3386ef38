# A short MoE run for the sanitizer build: dp = 2 with ep = 2, capacity,
# shared experts, ZeRO-3 (experts gathered over edp), evaluation and a
# per-writer checkpoint, resumed at tp = 2 with etp = 2 and sp; meshckpt
# verify reads the experts back.
MT_NAME=moe_smoke
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=4 --set train.eval_every=2 --set train.eval_batches=1
      --set model.moe_capacity=1.25 --set model.moe_shared=1 --set ckpt.mode=per-writer)
run a 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2 \
  --set train.stop_after=2 --set output.dir="$WORK/run"
run b 2 --set parallel.tp=2 --set parallel.etp=2 --set parallel.sp=true --set train.micro_batch=4 \
  --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_2" "$WORK/b.log" || fail "no resume"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" --deep > "$WORK/verify.txt" 2>&1 \
  || { cat "$WORK/verify.txt"; fail "verify"; }
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK"/*.log "$WORK/verify.txt" || fail "sanitizer report"
echo PASS
