# Hugging Face MixtralForCausalLM: a tiny Llama with 4 SwiGLU experts in
# every block (top-2, experts of 48 hidden units), trained 40 steps at dp 2
# with the experts over ep 2, exports with exactly Mixtral's names and
# shapes (each expert's w1 and w3 the gate and up rows of our fused expert
# tensor, w2 its proj); import(export) is the checkpoint bitwise; the
# independent numpy Mixtral (tests/ckpt/llama_ref.py: softmax router, top-2
# renormalised) gets the loss of meshtrain's first step from the import
# within 1e-6 (relative) at dp 1 and at tp 2 (a map that swapped w1 and
# w3, or took another expert's rows, would import bitwise and fail here:
# silu(gate) x up is not symmetric); sharded and bf16 exports;
# refused with one line: experts every other block, shared experts, a
# sigmoid router, a routing bias of aux-loss-free balancing (none of which
# Mixtral holds).
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy" 2> /dev/null || {
  echo "SKIP: numpy is not importable by python3 (apps/scripts/setup.sh installs it)"; exit 77; }
M="$MT_BIN/meshckpt"
REF="$MT_SRC/tests/ckpt/llama_ref.py"
moe=(--set model.preset=tiny-llama --set model.moe_experts=4 --set model.moe_topk=2
     --set model.moe_every=1 --set model.moe_ffn=48 --set data.train="$corpus"
     --set train.global_batch=8 --set train.micro_batch=4 --set train.eval_every=0
     --set train.warmup_steps=2 --set train.lr=1e-2)
mt_train src 2 "${moe[@]}" --set train.steps=40 --set parallel.dp=2 --set parallel.ep=2 \
  --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_40"
mt_mpirun 2 "$M" export "$SRC" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export"; }
shape=(hidden_size=32 num_hidden_layers=2 vocab_size=256 num_attention_heads=4
       num_key_value_heads=2 intermediate_size=48 num_local_experts=4 num_experts_per_tok=2
       tie_word_embeddings=false sliding_window=null)
hf_expect "$WORK/hf" "${shape[@]}"
hf_round_trip "$SRC" "$WORK/hf" imp
head -c 129 "$corpus" > "$WORK/seqs.txt"
hf_against_ref mixtral "$REF" "$WORK/hf" "$WORK/imp"
# the routing matters: the reference routing to the top 1 is another model
cp -r "$WORK/hf" "$WORK/hf_top1"
python3 - "$WORK/hf_top1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_experts_per_tok"] = 1; json.dump(c, open(sys.argv[1], "w"))
PY
hf_differs "routing to 1 expert of 2" "$ref" "$(python3 "$REF" "$WORK/hf_top1" "$WORK/seqs.txt" 32)"
# sharded, bf16
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf --max-shard-size 20KB > /dev/null || fail "sharded export"
[ "$(ls "$WORK/sharded"/model-*-of-*.safetensors | wc -l)" -gt 2 ] || fail "sharded export: no shards"
hf_expect "$WORK/sharded" "${shape[@]}"
hf_round_trip "$SRC" "$WORK/sharded" imp_sharded
hf_bf16 "$SRC" "$REF"

# what MixtralForCausalLM cannot hold: refused with one line, exit 2, nothing written
refused_export() { # NAME REGEX ARGS...: train NAME 2 steps with ARGS, its export refused
  local name=$1 re=$2 rc=0; shift 2
  mt_train "$name" 1 "${moe[@]}" --set train.steps=2 --set output.dir="$WORK/$name" "$@"
  mt_mpirun 2 "$M" export "$WORK/$name/checkpoints" "$WORK/out_$name" --format hf > "$WORK/$name.x.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/$name.x.log")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.x.log" \
    || { cat "$WORK/$name.x.log"; fail "$name: rc $rc, want one line matching /$re/"; }
  [ ! -e "$WORK/out_$name/config.json" ] || fail "$name: an export was written"
  echo "ok   $name: $(grep error: "$WORK/$name.x.log")"
}
refused_export every2 "MixtralForCausalLM has experts in every block and no shared experts; this model has moe_every = 2" \
  --set model.moe_every=2
refused_export shared "MixtralForCausalLM has experts in every block and no shared experts; this model has moe_every = 1, moe_shared = 1" \
  --set model.moe_shared=1
refused_export sigmoid "MixtralForCausalLM's router is a softmax over the experts; this model's is sigmoid" \
  --set model.moe_router=sigmoid
refused_export balance_bias "its experts are chosen with a balancing bias \(train.moe_balance = bias\)" \
  --set train.moe_balance=bias --set train.moe_bias_rate=0.01
# a GPT-2 with experts every second block: no class holds it (said before
# what a Mixtral would need)
refused_export gpt2_moe "a GPT-2 with experts has no Hugging Face class" \
  --set model.preset=tiny --set model.arch=gpt2 --set model.moe_every=2
echo PASS
