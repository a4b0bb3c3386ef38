# A short MoE run for the sanitizer build: dp = 2 with ep = 2, capacity,
# shared experts, ZeRO-3 (experts gathered over edp), evaluation and a
# per-writer checkpoint, resumed at tp = 2 with etp = 2 and sp; meshckpt
# verify reads the experts back. Then evaluation on 3 validation windows
# at dp = 2, ep = 2, micro-batch 1: dp rank 1 has one sequence to rank 0's
# two, and runs an empty micro-batch so the all-to-alls of rank 0's second
# one have their partner (no hang); the validation loss equals one rank's.
# Least-loaded expert parallelism under a forced skew in the first run and
# in the uneven evaluation (an empty micro-batch still takes part in the
# plan's all-gather). Then the Llama MoE (SwiGLU experts without biases,
# lent under the skew; the sigmoid router).
MT_NAME=moe_smoke
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=4 --set train.eval_every=2 --set train.eval_batches=1
      --set model.moe_capacity=1.25 --set model.moe_shared=1 --set ckpt.mode=per-writer)
SKEW=(--set train.moe_balance=bias --set train.moe_bias_rate=0 --set train.moe_bias_init=0.5)
run a 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2 \
  --set parallel.ep_balance=least-loaded "${SKEW[@]}" --set train.stop_after=2 --set output.dir="$WORK/run"
run b 2 --set parallel.tp=2 --set parallel.etp=2 --set parallel.sp=true --set train.micro_batch=4 \
  --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_2" "$WORK/b.log" || fail "no resume"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" --deep > "$WORK/verify.txt" 2>&1 \
  || { cat "$WORK/verify.txt"; fail "verify"; }
printf 'The quick brown fox jumps over the lazy dog again and again until the end of this short validation file.' \
  > "$WORK/val3.txt" # 104 bytes: 3 windows of 32 + 1 tokens
V=(--set data.val="$WORK/val3.txt" --set train.steps=1 --set train.eval_every=1 --set ckpt.mode=none
   "${SKEW[@]}")
run val1 1 "${V[@]}" --set train.micro_batch=8 --set output.dir="$WORK/val1"
run val2 2 "${V[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=1 \
  --set parallel.ep_balance=least-loaded --set output.dir="$WORK/val2"
python3 - "$WORK" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import within
a, b = (json.loads(open("%s/%s/metrics.jsonl" % (sys.argv[1], d)).readline())["val_loss"]
        for d in ("val1", "val2"))
if not within(b, a, 1e-5):  # NaN or null fails
    sys.exit("FAIL: validation loss %r at dp = 2, ep = 2; %r on one rank" % (b, a))
print("ok   uneven validation split: val loss %.6f on both" % a)
PY
# Llama blocks: SwiGLU experts without biases lent by least-loaded expert
# parallelism under the skew, the sigmoid router
run llama 2 --set model.preset=tiny-llama --set model.moe_router=sigmoid --set train.moe_z_coef=0 \
  --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set parallel.ep_balance=least-loaded "${SKEW[@]}" --set train.steps=2 --set ckpt.mode=none \
  --set output.dir="$WORK/llama"
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK"/*.log "$WORK/verify.txt" || fail "sanitizer report"
echo PASS
