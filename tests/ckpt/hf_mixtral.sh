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
# routing bias of aux-loss-free balancing (none of which Mixtral holds).
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
check_mixtral() {
  python3 - "$1" <<'PY' || fail "$1: the names, shapes or config are not MixtralForCausalLM's"
import json, os, struct, sys
d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
files = ["model.safetensors"] if os.path.exists(f"{d}/model.safetensors") else \
    sorted(set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values()))
h = {}
for f in files:
    blob = open(f"{d}/{f}", "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h.update({k: v["shape"] for k, v in json.loads(blob[8:8 + n]).items() if k != "__metadata__"})
assert cfg["architectures"] == ["MixtralForCausalLM"] and cfg["model_type"] == "mixtral", cfg
C, L, V, F = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
H, Hkv, E = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_local_experts"]
assert (C, L, V, H, Hkv, F, E, cfg["num_experts_per_tok"]) == (32, 2, 256, 4, 2, 48, 4, 2), cfg
assert cfg["tie_word_embeddings"] is False and cfg["sliding_window"] is None
kv = Hkv * C // H
want = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
for l in range(L):
    a = f"model.layers.{l}."
    want.update({a + "input_layernorm.weight": [C], a + "post_attention_layernorm.weight": [C],
                 a + "self_attn.q_proj.weight": [C, C], a + "self_attn.k_proj.weight": [kv, C],
                 a + "self_attn.v_proj.weight": [kv, C], a + "self_attn.o_proj.weight": [C, C],
                 a + "block_sparse_moe.gate.weight": [E, C]})
    for e in range(E):
        x = f"{a}block_sparse_moe.experts.{e}."
        want.update({x + "w1.weight": [F, C], x + "w3.weight": [F, C], x + "w2.weight": [C, F]})
missing, extra = sorted(set(want) - set(h)), sorted(set(h) - set(want))
assert not missing and not extra, f"missing {missing}, extra {extra}"
bad = {k: (h[k], want[k]) for k in want if h[k] != want[k]}
assert not bad, f"shapes {bad}"
print(f"{d}: {len(h)} tensors in {len(files)} file(s), exactly MixtralForCausalLM's names and shapes")
PY
}
check_mixtral "$WORK/hf"
mt_mpirun 2 "$M" import "$WORK/hf" "$WORK/imp" --format hf > "$WORK/import.log" || { cat "$WORK/import.log"; fail "import"; }
"$M" verify "$WORK/imp/step_0" | grep -q "OK (step 0, .*parameters only" || fail "the import does not verify"
hf_same_params "$SRC" "$WORK/imp/step_0"
echo "ok   import(export) is the checkpoint's parameters bitwise"

head -c 129 "$corpus" > "$WORK/seqs.txt"
ref=$(python3 "$REF" "$WORK/hf" "$WORK/seqs.txt" 32) || fail "the numpy reference failed"
hf_step_loss dp1 1 "$WORK/imp" "$WORK/seqs.txt" --set train.micro_batch=4
hf_close "Mixtral, dp 1" "$ref" "$loss" 1e-6
hf_step_loss tp2 2 "$WORK/imp" "$WORK/seqs.txt" --set train.micro_batch=4 --set parallel.tp=2
hf_close "Mixtral, tp 2" "$ref" "$loss" 1e-6
# the routing matters: the reference routing to the top 1 is another model
cp -r "$WORK/hf" "$WORK/hf_top1"
python3 - "$WORK/hf_top1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_experts_per_tok"] = 1; json.dump(c, open(sys.argv[1], "w"))
PY
ref1=$(python3 "$REF" "$WORK/hf_top1" "$WORK/seqs.txt" 32)
python3 -c "import sys; a, b = map(float, sys.argv[1:]); d = abs(a - b) / a; print(f'routing to 1 expert moves the loss by {d:.1e} (relative)'); sys.exit(0 if d > 1e-4 else 1)" \
  "$ref" "$ref1" || fail "top-1 and top-2 give the same loss: the test could not catch a wrong routing"

# sharded, bf16
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf --max-shard-size 20KB > /dev/null || fail "sharded export"
[ "$(ls "$WORK/sharded"/model-*-of-*.safetensors | wc -l)" -gt 2 ] || fail "sharded export: no shards"
check_mixtral "$WORK/sharded"
mt_mpirun 2 "$M" import "$WORK/sharded" "$WORK/imp_sharded" --format hf > /dev/null || fail "import of the shards"
hf_same_params "$SRC" "$WORK/imp_sharded/latest"
mt_mpirun 1 "$M" export "$SRC" "$WORK/hf16" --format hf --dtype bf16 > /dev/null || fail "bf16 export"
ref16=$(python3 "$REF" "$WORK/hf16" "$WORK/seqs.txt" 32)
python3 -c "import sys; d = abs(float(sys.argv[1]) - float(sys.argv[2])) / float(sys.argv[1]); print(f'bf16 export: loss {sys.argv[2]} ({d:.1e} relative from fp32)'); sys.exit(0 if 0 < d < 1e-2 else 1)" "$ref" "$ref16" \
  || fail "the bf16 export is not the model within bf16 rounding"

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
refused_export balance_bias "its experts are chosen with a balancing bias \(train.moe_balance = bias\)" \
  --set train.moe_balance=bias --set train.moe_bias_rate=0.01
echo PASS
