# Hugging Face LlamaForCausalLM: a tiny Llama (grouped-query attention: 2
# key/value heads for 4 query heads; untied LM head) trained 40 steps at dp
# 2 exports to config.json and model.safetensors with exactly Llama's
# names and shapes; import(export) is the checkpoint's parameters bitwise;
# an independent numpy Llama (tests/ckpt/llama_ref.py: Hugging Face's
# rotate_half rotary, repeat_kv, SwiGLU, RMSNorm, float64) gets the loss of
# meshtrain's first step from the import within 1e-6 (relative) at dp 1
# and at tp 2. A sharded export (--max-shard-size) writes shards and
# model.safetensors.index.json that import bitwise; bf16 is the model
# within bf16 rounding; a Llama 3.1 rotary scaling (rope_scaling llama3,
# rope_theta 5000) exports, imports and computes the reference's loss (and
# the scaling matters: without it the loss differs); bos/eos ids of the
# source (an id, a list) survive import -> a run from it -> its
# checkpoint -> export.
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy" 2> /dev/null || {
  echo "SKIP: numpy is not importable by python3 (apps/scripts/setup.sh installs it)"; exit 77; }
M="$MT_BIN/meshckpt"
REF="$MT_SRC/tests/ckpt/llama_ref.py"
llama=(--set model.preset=tiny-llama --set data.train="$corpus" --set train.global_batch=8
       --set train.micro_batch=4 --set train.eval_every=0 --set train.warmup_steps=2
       --set train.lr=1e-2 --set train.steps=40)
mt_train src 2 "${llama[@]}" --set parallel.dp=2 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_40"
mt_mpirun 2 "$M" export "$SRC" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export"; }
grep -q "LlamaForCausalLM" "$WORK/export.log" || { cat "$WORK/export.log"; fail "export: not a LlamaForCausalLM"; }
# check_llama DIR: every tensor LlamaForCausalLM of config.json has, of its
# shape, and nothing else (in one file or the shards of the index)
check_llama() {
  python3 - "$1" <<'PY' || fail "$1: the names, shapes or config are not LlamaForCausalLM's"
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
assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
C, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
H, Hkv, F = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
assert (C, L, V, H, Hkv, F) == (32, 2, 256, 4, 2, 96), (C, L, V, H, Hkv, F)
assert cfg["head_dim"] == 8 and cfg["hidden_act"] == "silu" and cfg["max_position_embeddings"] == 32
assert cfg["tie_word_embeddings"] is False and cfg["attention_bias"] is False and cfg["mlp_bias"] is False
assert cfg["rms_norm_eps"] == 1e-05 and cfg["rope_theta"] == 10000.0 and cfg["rope_scaling"] is None
kv = Hkv * C // H
want = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
for l in range(L):
    a = f"model.layers.{l}."
    want.update({a + "input_layernorm.weight": [C], a + "post_attention_layernorm.weight": [C],
                 a + "self_attn.q_proj.weight": [C, C], a + "self_attn.k_proj.weight": [kv, C],
                 a + "self_attn.v_proj.weight": [kv, C], a + "self_attn.o_proj.weight": [C, C],
                 a + "mlp.gate_proj.weight": [F, C], a + "mlp.up_proj.weight": [F, C],
                 a + "mlp.down_proj.weight": [C, F]})
missing, extra = sorted(set(want) - set(h)), sorted(set(h) - set(want))
assert not missing and not extra, f"missing {missing}, extra {extra}"
bad = {k: (h[k], want[k]) for k in want if h[k] != want[k]}
assert not bad, f"shapes {bad}"
print(f"{d}: {len(h)} tensors in {len(files)} file(s), exactly LlamaForCausalLM's names and shapes")
PY
}
check_llama "$WORK/hf"
mt_mpirun 2 "$M" import "$WORK/hf" "$WORK/imp" --format hf > "$WORK/import.log" || { cat "$WORK/import.log"; fail "import"; }
"$M" verify "$WORK/imp/step_0" | grep -q "OK (step 0, .*parameters only" || fail "the import does not verify"
hf_same_params "$SRC" "$WORK/imp/step_0"
echo "ok   import(export) is the checkpoint's parameters bitwise"

# the reference's loss on 4 windows of 32 tokens against meshtrain's first
# step from the import
head -c 129 "$corpus" > "$WORK/seqs.txt"
ref=$(python3 "$REF" "$WORK/hf" "$WORK/seqs.txt" 32) || fail "the numpy reference failed"
hf_step_loss dp1 1 "$WORK/imp" "$WORK/seqs.txt" --set train.micro_batch=4
hf_close "Llama, dp 1" "$ref" "$loss" 1e-6
hf_step_loss tp2 2 "$WORK/imp" "$WORK/seqs.txt" --set train.micro_batch=4 --set parallel.tp=2
hf_close "Llama, tp 2" "$ref" "$loss" 1e-6

# sharded: 8 KB shards (the embedding and the head, 32 KiB each, alone)
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf --max-shard-size 8KB > /dev/null || fail "sharded export"
n=$(ls "$WORK/sharded"/model-*-of-*.safetensors | wc -l)
[ "$n" -gt 2 ] && [ ! -e "$WORK/sharded/model.safetensors" ] || fail "sharded export: $n shards"
python3 - "$WORK/sharded" <<'PY' || fail "the index is not the shards'"
import json, os, struct, sys
d = sys.argv[1]
x = json.load(open(f"{d}/model.safetensors.index.json"))
total, names = 0, set()
for f in sorted(set(x["weight_map"].values())):
    blob = open(f"{d}/{f}", "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = {k: v for k, v in json.loads(blob[8:8 + n]).items() if k != "__metadata__"}
    assert all(x["weight_map"][k] == f for k in h), f
    assert len(blob) - 8 - n <= 8192 or len(h) == 1, f"{f}: {len(blob)} bytes, {len(h)} tensors"
    total += len(blob) - 8 - n; names |= set(h)
assert names == set(x["weight_map"]) and x["metadata"]["total_size"] == total, (total, x["metadata"])
print(f"sharded: {len(set(x['weight_map'].values()))} shards of at most 8 KB (a larger tensor alone), index total_size {total}")
PY
check_llama "$WORK/sharded"
mt_mpirun 2 "$M" import "$WORK/sharded" "$WORK/imp_sharded" --format hf > /dev/null || fail "import of the shards"
hf_same_params "$SRC" "$WORK/imp_sharded/latest"
# the same directory exported again in one file: the index goes
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf > /dev/null || fail "export over shards"
[ ! -e "$WORK/sharded/model.safetensors.index.json" ] || fail "a stale index beside model.safetensors"
echo "ok   sharded export imports bitwise"

# bf16
mt_mpirun 1 "$M" export "$SRC" "$WORK/hf16" --format hf --dtype bf16 > /dev/null || fail "bf16 export"
grep -q '"torch_dtype": "bfloat16"' "$WORK/hf16/config.json" || fail "bf16 export: config"
ref16=$(python3 "$REF" "$WORK/hf16" "$WORK/seqs.txt" 32)
python3 -c "import sys; d = abs(float(sys.argv[1]) - float(sys.argv[2])) / float(sys.argv[1]); print(f'bf16 export: loss {sys.argv[2]} ({d:.1e} relative from fp32)'); sys.exit(0 if 0 < d < 1e-2 else 1)" "$ref" "$ref16" \
  || fail "the bf16 export is not the model within bf16 rounding"

# Llama 3.1's rotary scaling: wavelengths 6, 63, 628, 6283 tokens against
# rope_original_len 64 (low 1, high 4): one kept, one blended, two scaled
mt_train rope 1 "${llama[@]}" --set model.rope_theta=10000 --set model.rope_scaling=llama3 \
  --set model.rope_factor=8 --set model.rope_low_freq_factor=1 --set model.rope_high_freq_factor=4 \
  --set model.rope_original_len=64 --set output.dir="$WORK/rope"
mt_mpirun 1 "$M" export "$WORK/rope/checkpoints" "$WORK/hf_rope" --format hf > /dev/null || fail "rope export"
python3 - "$WORK/hf_rope/config.json" <<'PY' || fail "rope_scaling is not llama3's in config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, c["rope_scaling"]
assert c["rope_theta"] == 10000.0
PY
mt_mpirun 1 "$M" import "$WORK/hf_rope" "$WORK/imp_rope" --format hf > /dev/null || fail "rope import"
hf_same_params "$WORK/rope/checkpoints/latest" "$WORK/imp_rope/latest"
ref_rope=$(python3 "$REF" "$WORK/hf_rope" "$WORK/seqs.txt" 32)
hf_step_loss rope1 1 "$WORK/imp_rope" "$WORK/seqs.txt" --set train.micro_batch=4
hf_close "Llama, rope_scaling llama3" "$ref_rope" "$loss" 1e-6
grep -q "^rope_scaling = llama3$" "$WORK/rope1/config.ini" && grep -q "^rope_original_len = 64$" "$WORK/rope1/config.ini" \
  || fail "the run from the import does not take rope_scaling from it"
# the scaling matters here: the reference without it is another model
cp -r "$WORK/hf_rope" "$WORK/hf_norope"
python3 - "$WORK/hf_norope/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rope_scaling"] = None; json.dump(c, open(sys.argv[1], "w"))
PY
ref_norope=$(python3 "$REF" "$WORK/hf_norope" "$WORK/seqs.txt" 32)
python3 -c "import sys; a, b = map(float, sys.argv[1:]); d = abs(a - b) / a; print(f'without rope_scaling the loss moves by {d:.1e} (relative)'); sys.exit(0 if d > 1e-4 else 1)" \
  "$ref_rope" "$ref_norope" || fail "rope_scaling changes nothing in this test: it could not catch a wrong scaling"

# bos/eos: the source's (an id, a list of three) through import, a run
# from the import with its own checkpoint, export
cp -r "$WORK/hf" "$WORK/hf_ids"
python3 - "$WORK/hf_ids/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["bos_token_id"] = 1; c["eos_token_id"] = [2, 3, 255]
json.dump(c, open(sys.argv[1], "w"))
PY
mt_mpirun 1 "$M" import "$WORK/hf_ids" "$WORK/imp_ids" --format hf > /dev/null || fail "import with ids"
mt_train ids 2 --set data.train="$corpus" --set train.global_batch=8 --set train.micro_batch=4 \
  --set train.steps=2 --set train.eval_every=0 --set parallel.tp=2 \
  --set train.init_from="$WORK/imp_ids/latest" --set output.dir="$WORK/ids"
mt_mpirun 1 "$M" export "$WORK/ids/checkpoints" "$WORK/hf_ids_out" --format hf > /dev/null || fail "export of the run"
python3 - "$WORK/hf_ids_out/config.json" <<'PY' || fail "bos/eos did not survive import -> run -> export"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["bos_token_id"] == 1 and c["eos_token_id"] == [2, 3, 255], (c["bos_token_id"], c["eos_token_id"])
assert c["meshtrain_step"] == 2
print("ok   bos_token_id 1, eos_token_id [2, 3, 255] through import, a run of 2 steps, export")
PY
echo PASS
