# The exports loaded by transformers (issue 14; Llama and Mixtral): GPT-2's
# by GPT2LMHeadModel, a tiny Llama's (grouped-query attention, untied head,
# rope_scaling llama3) by LlamaForCausalLM and a tiny Mixtral's (4 experts,
# top 2) by MixtralForCausalLM, each through from_pretrained with no
# missing, unexpected or mismatched key; the loss of each on the same
# windows equals the numpy reference's and that of meshtrain's first step
# from the import of the export. Needs torch and transformers importable by
# python3; CI does not download them on every run, so the test skips
# without them. To run it:
#   python3 -m pip install torch transformers     (the CPU build of torch suffices)
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy, torch, transformers" 2> /dev/null || {
  echo "SKIP: torch and transformers are not importable by python3 (python3 -m pip install torch transformers enables this test)"
  exit 77; }
M="$MT_BIN/meshckpt"
head -c 129 "$corpus" > "$WORK/seqs.txt"
# case NAME REF RTOL TRAIN_ARGS...: train NAME (8 steps), export, import;
# numpy, transformers and meshtrain agree on the loss within RTOL (relative)
case_of() {
  local name=$1 ref=$2 rtol=$3; shift 3
  mt_train "$name" 1 --set data.train="$corpus" --set train.global_batch=8 --set train.micro_batch=8 \
    --set train.eval_every=0 --set train.steps=8 --set train.lr=1e-2 --set output.dir="$WORK/$name" "$@"
  mt_mpirun 1 "$M" export "$WORK/$name/checkpoints" "$WORK/hf_$name" --format hf > /dev/null || fail "$name: export"
  mt_mpirun 1 "$M" import "$WORK/hf_$name" "$WORK/imp_$name" --format hf > /dev/null || fail "$name: import"
  local np_loss torch_loss
  np_loss=$(python3 "$MT_SRC/tests/ckpt/$ref" "$WORK/hf_$name" "$WORK/seqs.txt" 32) || fail "$name: numpy reference"
  torch_loss=$(python3 "$MT_SRC/tests/ckpt/$ref" "$WORK/hf_$name" "$WORK/seqs.txt" 32 --torch) \
    || fail "$name: transformers did not load the export whole"
  hf_step_loss "one_$name" 1 "$WORK/imp_$name" "$WORK/seqs.txt" --set train.micro_batch=4
  hf_close "$name: transformers against numpy" "$np_loss" "$torch_loss" "$rtol"
  hf_close "$name: meshtrain against transformers" "$torch_loss" "$loss" "$rtol"
}
case_of gpt2 gpt2_ref.py 1e-6 --set model.preset=tiny
case_of llama llama_ref.py 1e-6 --set model.preset=tiny-llama --set model.rope_scaling=llama3 \
  --set model.rope_original_len=64
case_of mixtral llama_ref.py 1e-6 --set model.preset=tiny-llama --set model.moe_experts=4 \
  --set model.moe_topk=2 --set model.moe_ffn=48
echo PASS
