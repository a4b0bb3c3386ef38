# Hugging Face LlamaForCausalLM: a tiny Llama (grouped-query attention: 2
# key/value heads for 4 query heads; untied LM head) trained 40 steps at dp
# 2 exports to config.json and model.safetensors with exactly Llama's
# names and shapes; import(export) is the checkpoint's parameters bitwise;
# an independent numpy Llama (tests/ckpt/llama_ref.py: Hugging Face's
# rotate_half rotary, repeat_kv, SwiGLU, RMSNorm, float64) gets the loss of
# meshtrain's first step from the import within 1e-6 (relative) at dp 1
# and at tp 2. A sharded export (--max-shard-size) writes shards and
# model.safetensors.index.json that import bitwise; bf16 is the model
# within bf16 rounding; a tied Llama with biases likewise; a Llama 3.1 rotary scaling (rope_scaling llama3)
# exports, imports, is taken by a run from the import and computes the
# reference's loss (and the scaling matters: without it the loss differs);
# bos/eos ids of the source (an id, a list) survive import -> a run from
# it -> its checkpoint -> export.
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy" 2> /dev/null || {
  echo "SKIP: numpy is not importable by python3 (apps/scripts/setup.sh installs it)"; exit 77; }
M="$MT_BIN/meshckpt"
REF="$MT_SRC/tests/ckpt/llama_ref.py"
llama=(--set model.preset=tiny-llama --set data.train="$corpus" --set train.global_batch=8
       --set train.micro_batch=4 --set train.eval_every=0 --set train.warmup_steps=2
       --set train.lr=1e-2 --set train.steps=40)
shape=(hidden_size=32 num_hidden_layers=2 vocab_size=256 num_attention_heads=4
       num_key_value_heads=2 intermediate_size=96 head_dim=8 hidden_act='"silu"'
       max_position_embeddings=32 tie_word_embeddings=false attention_bias=false mlp_bias=false
       rms_norm_eps=1e-5 rope_theta=10000.0)
mt_train src 2 "${llama[@]}" --set parallel.dp=2 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_40"
mt_mpirun 2 "$M" export "$SRC" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export"; }
hf_expect "$WORK/hf" "${shape[@]}" rope_scaling=null bos_token_id=255 eos_token_id=255
hf_round_trip "$SRC" "$WORK/hf" imp
head -c 129 "$corpus" > "$WORK/seqs.txt"
hf_against_ref llama "$REF" "$WORK/hf" "$WORK/imp"

# sharded: 8 KB shards (the embedding and the head, 32 KiB each, alone)
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf --max-shard-size 8KB > /dev/null || fail "sharded export"
n=$(ls "$WORK/sharded"/model-*-of-*.safetensors | wc -l)
[ "$n" -gt 2 ] && [ ! -e "$WORK/sharded/model.safetensors" ] || fail "sharded export: $n shards"
python3 - "$WORK/sharded" <<'PY' || fail "the index is not the shards'"
import json, struct, sys
d = sys.argv[1]
x = json.load(open(f"{d}/model.safetensors.index.json"))
total, names = 0, set()
for f in sorted(set(x["weight_map"].values())):
    blob = open(f"{d}/{f}", "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = {k: v for k, v in json.loads(blob[8:8 + n]).items() if k != "__metadata__"}
    assert all(x["weight_map"][k] == f for k in h), f
    assert len(blob) - 8 - n <= 8000 or len(h) == 1, f"{f}: {len(blob)} bytes, {len(h)} tensors"
    total += len(blob) - 8 - n; names |= set(h)
assert names == set(x["weight_map"]) and x["metadata"]["total_size"] == total, (total, x["metadata"])
print(f"sharded: {len(set(x['weight_map'].values()))} shards of at most 8 KB (a larger tensor alone), index total_size {total}")
PY
hf_expect "$WORK/sharded" "${shape[@]}"
hf_round_trip "$SRC" "$WORK/sharded" imp_sharded
# again in fewer, larger shards, then in one file: no shard of an earlier
# export stays behind, nor its index
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf --max-shard-size 40KB > /dev/null ||
  fail "export over shards"
m=$(ls "$WORK/sharded"/model-*-of-*.safetensors | wc -l)
[ "$m" -lt "$n" ] && ! ls "$WORK/sharded"/model-*-of-*.safetensors | grep -vq -- "-of-$(printf %05d "$m")" ||
  fail "shards of the $n-shard export stayed beside the $m new ones"
mt_mpirun 1 "$M" export "$SRC" "$WORK/sharded" --format hf > /dev/null || fail "export over shards"
[ ! -e "$WORK/sharded/model.safetensors.index.json" ] || fail "a stale index beside model.safetensors"
! ls "$WORK/sharded"/model-*-of-*.safetensors 2> /dev/null || fail "shards beside model.safetensors"
hf_bf16 "$SRC" "$REF"

# tied embeddings and biases on every linear (attention_bias = mlp_bias = true)
mt_train tb 1 "${llama[@]}" --set model.tie_embeddings=true --set model.bias=true --set output.dir="$WORK/tb"
mt_mpirun 1 "$M" export "$WORK/tb/checkpoints" "$WORK/hf_tb" --format hf > /dev/null || fail "tied, biased export"
hf_expect "$WORK/hf_tb" tie_word_embeddings=true attention_bias=true mlp_bias=true
hf_round_trip "$WORK/tb/checkpoints/latest" "$WORK/hf_tb" imp_tb
hf_against_ref tied_bias "$REF" "$WORK/hf_tb" "$WORK/imp_tb"

# Llama 3.1's rotary scaling: wavelengths 6, 63, 628, 6283 tokens against
# rope_original_len 64 (low 1, high 4): one kept, one blended, two scaled
mt_train rope 1 "${llama[@]}" --set model.rope_scaling=llama3 --set model.rope_factor=8 \
  --set model.rope_low_freq_factor=1 --set model.rope_high_freq_factor=4 \
  --set model.rope_original_len=64 --set output.dir="$WORK/rope"
mt_mpirun 1 "$M" export "$WORK/rope/checkpoints" "$WORK/hf_rope" --format hf > /dev/null || fail "rope export"
hf_expect "$WORK/hf_rope" "${shape[@]}" rope_scaling='{"rope_type": "llama3", "factor": 8.0,
  "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}'
hf_round_trip "$WORK/rope/checkpoints/latest" "$WORK/hf_rope" imp_rope
hf_against_ref rope "$REF" "$WORK/hf_rope" "$WORK/imp_rope"
grep -q "^rope_scaling = llama3$" "$WORK/rope_dp1/config.ini" && grep -q "^rope_original_len = 64$" "$WORK/rope_dp1/config.ini" \
  || fail "the run from the import does not take rope_scaling from it"
# the scaling matters here: the reference without it is another model
cp -r "$WORK/hf_rope" "$WORK/hf_norope"
python3 - "$WORK/hf_norope/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rope_scaling"] = None; json.dump(c, open(sys.argv[1], "w"))
PY
hf_differs "rope_scaling" "$ref" "$(python3 "$REF" "$WORK/hf_norope" "$WORK/seqs.txt" 32)"

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
hf_expect "$WORK/hf_ids_out" bos_token_id=1 eos_token_id='[2, 3, 255]' meshtrain_step=2
echo PASS
