# Muon on the CUDA backend (optim.name = muon): the Newton-Schulz iteration,
# the exchange's pieces and the update go through the op table and comm's
# device paths. One GPU rank against the CPU's one rank within 1e-4
# relative at each of 5 steps, and dp 2 at ZeRO 1 and tp 2 + sp on GPUs
# against the one GPU rank within 1e-5; bf16 (the iteration in bf16) within
# 2e-2 of the CPU's bf16 run, and its loss falls.
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=5 --set train.global_batch=8
   --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
   --set optim.name=muon --set train.micro_batch=2)
train cpu 1 "${C[@]}" --set output.dir="$WORK/cpu"
train one 1 "${C[@]}" --set train.device=cuda --set output.dir="$WORK/one"
train dp2z1 2 "${C[@]}" --set train.device=cuda --set parallel.dp=2 --set parallel.zero=1 \
  --set train.micro_batch=1 --set output.dir="$WORK/dp2z1"
train tp2sp 2 "${C[@]}" --set train.device=cuda --set parallel.tp=2 --set parallel.sp=true \
  --set output.dir="$WORK/tp2sp"
python3 "$CMP" "$WORK/cpu" "$WORK/one" --rtol 1e-4 --steps 5
python3 "$CMP" "$WORK/one" "$WORK/dp2z1" "$WORK/tp2sp" --rtol 1e-5 --steps 5
train bf16 1 "${C[@]}" --set train.device=cuda --set train.precision=bf16 --set output.dir="$WORK/bf16"
train cpu_bf16 1 "${C[@]}" --set train.precision=bf16 --set output.dir="$WORK/cpu_bf16"
python3 "$CMP" "$WORK/cpu_bf16" "$WORK/bf16" --rtol 2e-2 --steps 5
python3 - "$WORK/bf16/metrics.jsonl" <<'PY' || fail "bf16 Muon on the GPU: the loss did not fall"
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1])]
print("bf16 loss %.4f -> %.4f" % (l[0], l[-1]))
sys.exit(0 if l[-1] < l[0] - 0.02 else 1)
PY
echo PASS
