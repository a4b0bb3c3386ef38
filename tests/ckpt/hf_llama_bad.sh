# meshckpt import of a Hugging Face Llama or Mixtral it cannot represent:
# one error line naming the key and its value (or the tensor), exit 2 on
# every rank (2 ranks), nothing written. The directories are a tiny Llama's
# export edited one thing at a time; the export itself imports (so each
# refusal is the edit's).
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
mt_train src 1 --set model.preset=tiny-llama --set data.train="$corpus" --set train.global_batch=8 \
  --set train.micro_batch=8 --set train.steps=2 --set train.eval_every=0 --set output.dir="$WORK/src"
mt_mpirun 1 "$M" export "$WORK/src/checkpoints" "$WORK/hf" --format hf > /dev/null || fail "export"
mt_mpirun 2 "$M" import "$WORK/hf" "$WORK/out_hf" --format hf > "$WORK/good.log" 2>&1 \
  || { cat "$WORK/good.log"; fail "the unedited export does not import"; }
bad() { hf_refused 2 "$@"; } # NAME REGEX

# config.json
rewrite gelu 'cfg["hidden_act"] = "gelu"'
bad gelu "config.json: hidden_act = 'gelu' is not silu: meshtrain's llama MLP is SwiGLU"
rewrite bias_mix 'cfg["attention_bias"] = False; cfg["mlp_bias"] = True'
bad bias_mix "config.json: mlp_bias = true but attention_bias = false: meshtrain's model.bias puts biases on every linear or on none"
rewrite head_dim 'cfg["head_dim"] = 16'
bad head_dim "config.json: head_dim = 16 is not hidden_size / num_attention_heads = 8"
rewrite yarn 'cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}'
bad yarn "config.json: rope_scaling type 'yarn' is not llama3"
rewrite llama3_short 'cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}'
bad llama3_short "config.json: rope_scaling.original_max_position_embeddings = \(not given\) is not an integer"
rewrite kv_heads 'cfg["num_key_value_heads"] = 3'
bad kv_heads "config.json: num_key_value_heads = 3 does not divide num_attention_heads = 4"
rewrite ids 'cfg["eos_token_id"] = "</s>"'
bad ids "config.json: eos_token_id = '</s>' is not a token id, a list of ids or null"
rewrite window 'cfg["model_type"] = "mixtral"; cfg["num_local_experts"] = 4; cfg["num_experts_per_tok"] = 2; cfg["sliding_window"] = 16'
bad window "config.json: sliding_window = 16 is shorter than max_position_embeddings = 32"
rewrite topk 'cfg["model_type"] = "mixtral"; cfg["num_local_experts"] = 2; cfg["num_experts_per_tok"] = 3'
bad topk "config.json: num_experts_per_tok = 3 is more than num_local_experts = 2"

# tensors
rewrite missing 'del t["model.layers.1.self_attn.k_proj.weight"]'
bad missing "no tensor model.layers.1.self_attn.k_proj.weight \(LlamaForCausalLM with this config.json needs it, shape \[16, 32\]\)"
rewrite wrong_shape 'x = t["model.layers.0.self_attn.k_proj.weight"]; x[1] = [8, 64]'
bad wrong_shape "model.layers.0.self_attn.k_proj.weight has shape \[8, 64\]; the LlamaForCausalLM of config.json needs \[16, 32\]"
rewrite extra 'x = t["model.norm.weight"]; t["model.layers.0.mlp.gate_proj.bias"] = [x[0], [96], bytes(96 * 4)]'
bad extra "tensor model.layers.0.mlp.gate_proj.bias is not part of LlamaForCausalLM with config.json's sizes"
rewrite tied 'cfg["tie_word_embeddings"] = True'
bad tied "lm_head.weight differs from embed_tokens.weight: config.json ties them"
echo PASS
