# The exported GPT-2 loaded by transformers' GPT2LMHeadModel (issue 14): its
# loss on the same windows equals the numpy reference's and meshtrain's within
# 1e-4. Needs torch and transformers importable by python3; CI does not
# download them on every run, so the test skips without them. To run it:
#   python3 -m pip install torch transformers     (the CPU build of torch suffices)
source "$(dirname "$0")/common_ckpt.sh"
python3 -c "import numpy, torch, transformers" 2> /dev/null || {
  echo "SKIP: torch and transformers are not importable by python3 (python3 -m pip install torch transformers enables this test)"
  exit 77; }
M="$MT_BIN/meshckpt"
REF="$MT_SRC/tests/ckpt/gpt2_ref.py"
train src 2 --set train.steps=6 --set parallel.dp=2 --set train.micro_batch=4 --set output.dir="$WORK/src"
mt_mpirun 1 "$M" export "$WORK/src/checkpoints/step_6" "$WORK/hf" --format hf > /dev/null || fail "export"
mt_mpirun 1 "$M" import "$WORK/hf" "$WORK/imp" --format hf > /dev/null || fail "import"
head -c 129 "$corpus" > "$WORK/seqs.txt"
np_loss=$(python3 "$REF" "$WORK/hf" "$WORK/seqs.txt" 32)
torch_loss=$(python3 "$REF" "$WORK/hf" "$WORK/seqs.txt" 32 --torch) || fail "GPT2LMHeadModel did not load the export"
train one 1 --set data.train="$WORK/seqs.txt" --set data.val="$WORK/seqs.txt" --set train.global_batch=4 \
  --set train.micro_batch=4 --set train.steps=1 --set train.init_from="$WORK/imp" --set output.dir="$WORK/one"
mt_loss=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$WORK/one/metrics.jsonl")
python3 - "$np_loss" "$torch_loss" "$mt_loss" <<'PY' || fail "the losses differ by more than 1e-4"
import sys
n, t, m = map(float, sys.argv[1:4])
print(f"loss: numpy {n:.6f}, GPT2LMHeadModel {t:.6f}, meshtrain {m:.6f}")
sys.exit(0 if abs(t - n) <= 1e-4 and abs(t - m) <= 1e-4 else 1)
PY
echo PASS
