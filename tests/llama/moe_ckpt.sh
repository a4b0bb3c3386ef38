# Llama MoE checkpoints are universal: the tiny Llama with 4 SwiGLU experts
# (gate|up fused, split over etp as two blocks) and a shared expert trains 6
# steps at tp = 2 + sp with etp = 2 and checkpoints; resumes at dp = 2 x
# ep = 2 (ZeRO-3) to step 12 (per-writer); resumes on one rank to step 18.
# Every step equals an uninterrupted one-rank run within 1e-5. The etp = 2
# checkpoint converts for --target tp=2,etp=2,pp=2 and verifies, and the
# expert tensors record their two fused blocks. A run with the sigmoid
# router refuses the (softmax) checkpoint, naming moe_router.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/common_moe.sh"
common=("${moe_common[@]}" --set model.moe_shared=1 --set train.steps=18 --set ckpt.mode=shared)
run() { mt_train "$1" "$2" "${common[@]}" "${@:3}"; }
run ref 1 --set train.micro_batch=8 --set output.dir="$WORK/ref" --set ckpt.mode=none
run a 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 --set train.micro_batch=4 \
  --set train.stop_after=6 --set output.dir="$WORK/run"
"$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" > "$WORK/verify.txt" || { cat "$WORK/verify.txt"; fail "verify"; }
"$MT_BIN/meshckpt" inspect "$WORK/run/checkpoints" --tensors > "$WORK/inspect.txt"
for want in "blocks.0.moe.experts.fc.weight  *\[4, 128, 32\]" "blocks.0.moe.shared.up.weight  *\[64, 32\]"; do
  grep -q "$want" "$WORK/inspect.txt" || { cat "$WORK/inspect.txt"; fail "inspect: no '$want'"; }
done
h5dump -a /model/blocks.0.moe.experts.fc.weight/fused_blocks "$WORK/run/checkpoints/step_6/"*.h5 2>/dev/null \
  | grep -q "(0): 2" || fail "the experts' fc does not record its two fused blocks (gate|up)"
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$WORK/run/checkpoints" "$WORK/tgt" --mode per-writer \
  --target tp=2,etp=2,pp=2 > "$WORK/tgt.txt" 2>&1 || { cat "$WORK/tgt.txt"; fail "convert --target"; }
"$MT_BIN/meshckpt" verify "$WORK/tgt" > "$WORK/verifyt.txt" || { cat "$WORK/verifyt.txt"; fail "verify --target"; }
run b 2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=4 \
  --set train.stop_after=6 --set train.resume=auto --set output.dir="$WORK/run" --set ckpt.mode=per-writer
grep -q "resumed from .*step_6" "$WORK/b.log" || { cat "$WORK/b.log"; fail "ep did not resume etp"; }
run c 1 --set train.micro_batch=8 --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_12" "$WORK/c.log" || { cat "$WORK/c.log"; fail "one rank did not resume ep"; }
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/run" --rtol 1e-5 --steps 18
# the router is part of the model: a sigmoid run refuses the softmax
# checkpoint with one line (exit 2 on both ranks), and writes nothing
"$MT_BIN/meshckpt" inspect "$WORK/run/checkpoints" | grep -q "1 shared, softmax router" \
  || fail "inspect does not name the router"
before=$(ls "$WORK/run/checkpoints")
if mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set parallel.dp=2 --set train.micro_batch=4 \
  --set train.steps=20 --set model.moe_router=sigmoid --set train.resume=auto \
  --set output.dir="$WORK/run" > "$WORK/sig.log" 2>&1; then fail "a sigmoid run resumed a softmax checkpoint"; fi
grep -q "is a checkpoint of another model: moe_router = 0 there, 1 in this run" "$WORK/sig.log" \
  || { cat "$WORK/sig.log"; fail "no one-line refusal naming moe_router"; }
[ "$(ls "$WORK/run/checkpoints")" = "$before" ] || fail "the refused run changed the checkpoints"
echo "PASS: llama MoE checkpoints resume across layouts"
