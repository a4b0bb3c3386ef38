# tiny, fp32, 20 steps: one GPU follows the CPU run within 1e-4 relative at
# every step (fp32 on both; summation orders differ), its gradients of step 1
# follow the CPU's (the norm and every tensor's sums, tests/scripts/
# grad_check.py), and two GPU runs give the same losses bit for bit.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
   --set train.micro_batch=4 --set data.train="$corpus" --set train.eval_every=0
   --set ckpt.mode=none)
MT_TEST_GRAD_SUMS="$WORK/cpu.grads" train cpu 1 "${C[@]}" --set output.dir="$WORK/cpu"
MT_TEST_GRAD_SUMS="$WORK/gpu.grads" train gpu 1 "${C[@]}" --set train.device=cuda \
  --set output.dir="$WORK/gpu"
train gpu2 1 "${C[@]}" --set train.device=cuda --set output.dir="$WORK/gpu2"
grep -q "device cuda" "$WORK/gpu.log" || fail "the GPU run did not say it runs on cuda"
python3 "$CMP" "$WORK/cpu" "$WORK/gpu" --rtol 1e-4 --steps 20
grad_check "$WORK/cpu" "$WORK/gpu" fp32 "one GPU vs the CPU"
python3 "$CMP" "$WORK/gpu" "$WORK/gpu2" --bitwise --steps 20
python3 - "$WORK/gpu/summary.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["device"]
assert d["kind"] == "cuda" and d["precision"] == "fp32" and d["gemm"] == "fp32", d
print("device:", d["gpu"], "tensors peak", d["tensor_bytes_peak"], "B")
PY
echo PASS
