# Llama checkpoints are universal: the tiny Llama (untied head, grouped-query
# attention with its key/value heads replicated at tp = 4) trains 6 steps at
# tp = 2 with sp x dp = 2 at ZeRO-3 and checkpoints; resumes at pp = 2 zb-v
# (dp = 2) to step 12 and checkpoints (per-writer); resumes at tp = 4 (key
# and value heads on every rank) to step 18. The tp = 2 checkpoint also
# converts for a target layout (--target tp=4,pp=2: the replicated key/value
# heads written once) that verifies. Every step of every part equals an
# uninterrupted one-rank run of 18 steps within 1e-5; meshckpt inspect
# shows the architecture and the Llama tensors (q, k, v apart; lm_head);
# train.init_from with no model key takes the architecture from it.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny-llama --set model.n_layer=4 --set train.steps=18
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=0
        --set train.warmup_steps=5 --set train.lr=3e-3 --set ckpt.mode=shared)
run() { mt_train "$1" "$2" "${common[@]}" "${@:3}"; }
run ref 1 --set train.micro_batch=8 --set output.dir="$WORK/ref" --set ckpt.mode=none
run a 4 --set parallel.tp=2 --set parallel.sp=true --set parallel.dp=2 --set parallel.zero=3 \
  --set train.micro_batch=2 --set train.stop_after=6 --set output.dir="$WORK/run"
"$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" > "$WORK/verify.txt" || { cat "$WORK/verify.txt"; fail "verify"; }
"$MT_BIN/meshckpt" inspect "$WORK/run/checkpoints" --tensors > "$WORK/inspect.txt"
for want in "arch  *llama" "blocks.0.attn.k.weight  *\[16, 32\]" "lm_head.weight  *\[256, 32\]"; do
  grep -q "$want" "$WORK/inspect.txt" || { cat "$WORK/inspect.txt"; fail "inspect: no '$want'"; }
done
cp -r "$WORK/run" "$WORK/conv"
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$WORK/run/checkpoints" "$WORK/tgt" --mode per-writer \
  --target tp=4,pp=2 > "$WORK/tgt.txt" 2>&1 || { cat "$WORK/tgt.txt"; fail "convert --target tp=4,pp=2"; }
"$MT_BIN/meshckpt" verify "$WORK/tgt" > "$WORK/verifyt.txt" || { cat "$WORK/verifyt.txt"; fail "verify --target"; }
run b 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.schedule=zb-v \
  --set parallel.virtual_stages=2 --set train.micro_batch=2 --set train.stop_after=6 \
  --set train.resume=auto --set output.dir="$WORK/run" --set ckpt.mode=per-writer
grep -q "resumed from .*step_6 (step 6, written by dp=2 tp=2" "$WORK/b.log" || { cat "$WORK/b.log"; fail "pp did not resume tp"; }
run c 4 --set parallel.tp=4 --set train.micro_batch=8 --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_12" "$WORK/c.log" || { cat "$WORK/c.log"; fail "tp=4 did not resume pp"; }
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/run" --rtol 1e-5 --steps 18
# train.init_from with no model key at all: the architecture is the checkpoint's
mt_mpirun 1 "$MT_BIN/meshtrain" --set data.train="$corpus" --set train.global_batch=8 \
  --set train.micro_batch=8 --set train.eval_every=0 --set train.steps=1 --set ckpt.mode=none \
  --set train.init_from="$WORK/run/checkpoints/latest" --set output.dir="$WORK/init" \
  > "$WORK/init.log" 2>&1 || { cat "$WORK/init.log"; fail "init_from a Llama checkpoint"; }
grep -q "(llama: 2 key/value heads, MLP 96), .*(L=4 C=32 H=4 T=32 V=256)" "$WORK/init.log" \
  || { cat "$WORK/init.log"; fail "init_from: not the checkpoint's architecture"; }
grep -q "^arch = llama$" "$WORK/init/config.ini" || fail "config.ini does not say the architecture"
echo "PASS: llama checkpoints resume across layouts"
