# Hugging Face GPT-2 (issue 14): export writes model.safetensors + config.json;
# import(export(checkpoint)) gives back the parameters bitwise; an independent
# GPT-2 forward in numpy (tests/ckpt/gpt2_ref.py, reading the safetensors by
# hand) gets the loss meshtrain gets on the same sequences within 1e-6 (relative), with
# meshtrain started from the imported checkpoint (train.init_from) at dp 1 and
# at tp 2; bad files are refused with one line each.
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy" 2> /dev/null || {
  echo "SKIP: numpy is not importable by python3 (apps/scripts/setup.sh installs it)"; exit 77; }
M="$MT_BIN/meshckpt"
REF="$MT_SRC/tests/ckpt/gpt2_ref.py"
train src 2 --set train.steps=6 --set parallel.dp=2 --set train.micro_batch=4 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_6"
mt_mpirun 2 "$M" export "$SRC" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export"; }
[ -f "$WORK/hf/model.safetensors" ] && [ -f "$WORK/hf/config.json" ] || fail "export wrote no model.safetensors or config.json"
PYTHONPATH="$MT_SRC/tests/ckpt" python3 - "$WORK/hf" <<'PY' || fail "the exported names, shapes or config are not GPT2LMHeadModel's"
import json, sys
from safetensors_file import read
d = sys.argv[1]
h = read(f"{d}/model.safetensors")[0]; cfg = json.load(open(f"{d}/config.json"))
C, L, V = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"]
assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"]
assert "lm_head.weight" not in h and "transformer.lm_head.weight" not in h, "the tied head was stored"
assert h["transformer.wte.weight"]["shape"] == [V, C], "wte keeps padded rows"
assert h["transformer.h.0.attn.c_attn.weight"]["shape"] == [C, 3 * C], "c_attn not in x out"
assert h["transformer.h.0.mlp.c_fc.weight"]["shape"] == [C, 4 * C], "c_fc not in x out"
assert h["transformer.h.0.mlp.c_proj.weight"]["shape"] == [4 * C, C], "mlp.c_proj not in x out"
assert len([k for k in h if k != "__metadata__"]) == 4 + 12 * L
print("export: names, shapes and config are GPT2LMHeadModel's")
PY
hf_round_trip "$SRC" "$WORK/hf" imp

# the same 4 windows of 32 tokens for the reference and for meshtrain (a
# byte file of 4 x 32 + 1 bytes has exactly those windows; a global batch
# of 4 takes each once)
head -c 129 "$corpus" > "$WORK/seqs.txt"
hf_against_ref gpt2 "$REF" "$WORK/hf" "$WORK/imp"
# bf16: the same model within bf16 rounding
hf_bf16 "$SRC" "$REF"

# bad input: one line each, exit 2, nothing written (on 2 ranks)
bad() { hf_refused 2 "$@"; } # NAME REGEX
rm -rf "$WORK/truncated"; cp -r "$WORK/hf" "$WORK/truncated"; truncate -s 100 "$WORK/truncated/model.safetensors"
bad truncated "model.safetensors: truncated header"
rewrite wrong_shape 'x = t["transformer.h.1.attn.c_attn.weight"]; x[1] = [32, 64]; x[2] = x[2][:32 * 64 * 4]'
bad wrong_shape "transformer.h.1.attn.c_attn.weight has shape \[32, 64\]; the GPT2LMHeadModel of config.json needs \[32, 96\]"
rewrite dtype 't["transformer.ln_f.bias"][0] = "F8_E4M3"'
bad dtype "tensor transformer.ln_f.bias has dtype 'F8_E4M3', which this reader does not take"
rewrite other_model 'cfg["model_type"] = "bert"'
bad other_model "config.json describes a 'bert' model: meshckpt imports model_type gpt2, llama and mixtral"
rewrite gelu 'cfg["activation_function"] = "relu"'
bad gelu "activation_function 'relu' is not GELU with the tanh approximation"
rewrite untied 'x = t["transformer.wte.weight"]; t["lm_head.weight"] = [x[0], x[1], bytes(len(x[2]))]'
bad untied "lm_head.weight differs from wte.weight"
echo PASS
