# Gradients held in bf16 (train.grad_dtype = bf16, reduced in bf16), tiny
# under train.precision = bf16 over 20 steps:
# - one rank with 4 micro-batches (each added to the bf16 gradients with
#   one rounding), dp = 2 at ZeRO-1 (the bf16 gradients reduce-scattered
#   into a bf16 shard, AdamW reading it widened) and ZeRO-3 (each
#   micro-batch's bf16 bucket buffer reduce-scattered in bf16 and added to
#   the bf16 shard), pp = 2 (the tied embeddings' bf16 gradients summed
#   across the stages) with 1F1B and with zb-h1 (a block's gradients
#   written by two pieces: the input pass's LayerNorms, the weight pass's
#   matmuls), tp = 2 with sp at ZeRO-1 (sp's partial gradients summed over
#   tp from bf16): losses within rtol 1e-3 of the same global batch
#   on one rank with fp32 gradients. Why 1e-3: bf16_layouts.sh's bound
#   (u/4, u = 2^-8) for the layouts' weight-copy flips and tp roundings;
#   holding the gradients in bf16 adds one rounding per micro-batch to each
#   gradient (u/2 relative at most, unbiased), which AdamW's division by
#   the root of the second moment passes on as about that relative error of
#   the update, as the bf16 reduction does (measured: 4.7e-5 to 1.0e-4).
# - the one-rank run twice: the same bits; and not the fp32-gradient run's
#   bits (the accumulation is bf16).
# - the plan of gpt2-124m at dp = 8, ZeRO-1: the gradients are 2 bytes a
#   parameter held, plus the bf16 shard, plus the fp32 slots of one piece
#   of backward: the LM head's (the embeddings and the final LayerNorm).
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set train.warmup_steps=5
        --set train.lr=3e-3 --set train.precision=bf16)
g16=(--set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=2
run one 1 --set train.micro_batch=2 "${g16[@]}"
run again 1 --set train.micro_batch=2 "${g16[@]}"
run dp2z1 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 "${g16[@]}"
run dp2z3 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2 "${g16[@]}"
run pp2 2 --set parallel.pp=2 --set train.micro_batch=2 "${g16[@]}"
run pp2zb 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.micro_batch=2 "${g16[@]}"
run tp2spz1 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=1 \
  --set train.micro_batch=2 "${g16[@]}"
grep -q "gradients bf16" "$WORK/one.log" || { cat "$WORK/one.log"; fail "the start line does not say the gradients are bf16"; }
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/one" "$WORK/dp2z1" \
  "$WORK/dp2z3" "$WORK/pp2" "$WORK/pp2zb" "$WORK/tp2spz1" --rtol 1e-3 --steps 20
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/one" "$WORK/again" --bitwise --steps 20
if python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/one" --bitwise --steps 20 \
  > "$WORK/same.txt"; then
  fail "bf16 gradients gave the fp32 gradients' losses bit for bit (not accumulated in bf16?)"
fi

# the plan's gradient bytes (no MPI, nothing allocated)
"$MT_BIN/meshtrain" --set model.preset=gpt2-124m --set train.precision=bf16 \
  --set data.train="$corpus" --set train.global_batch=64 --set train.micro_batch=1 \
  --set parallel.dp=8 --set parallel.zero=1 "${g16[@]}" --plan-json "$WORK/plan.json" \
  > "$WORK/plan.txt" || { cat "$WORK/plan.txt"; fail "plan"; }
python3 - "$WORK/plan.json" <<'EOF' || fail "bf16 gradient bytes"
import json, sys
p = json.load(open(sys.argv[1]))
r = p["ranks"][0]
n = r["params_numel"]             # held (the vocabulary padded)
V, C, T, dp = 50304, 768, 1024, 8  # gpt2-124m, padded vocabulary
slots = V * C + T * C + 2 * C     # the LM head's piece: embeddings + final LayerNorm
want = 2 * n + 2 * (n // dp) + 4 * slots
got = r["mem_bytes"]["grads"]
print(f"gpt2-124m dp 8 ZeRO-1, bf16 gradients: {got} bytes ({got / n:.2f} a parameter), "
      f"expected 2 n + 2 n/dp + 4 x {slots} = {want}; comm {r['mem_bytes']['comm']}")
if got != want or r["mem_bytes"]["comm"] != 0:
    sys.exit("the gradients are not 2 bytes a parameter plus one piece's fp32 slots")
EOF
echo PASS
