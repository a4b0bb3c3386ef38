# dp = 2, tp = 2 with sequence parallelism, pp = 2, all three at once (8
# ranks), and dp = 2 with ZeRO-3, each within 1e-4 relative of one GPU rank
# at every step. Ranks that share a GPU (one GPU, the usual case here: NCCL
# refuses a GPU twice in a communicator) stage device buffers through host
# MPI, and ranks with a GPU each go over NCCL: summary.json must say which,
# as it happened (gpus_shared decides; check.sh's two-GPU smoke covers the
# other case on purpose).
source "$(dirname "$0")/common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
   --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
   --set train.device=cuda)
train one 1 "${C[@]}" --set train.micro_batch=4 --set output.dir="$WORK/one"
train dp2 2 "${C[@]}" --set parallel.dp=2 --set train.micro_batch=2 --set output.dir="$WORK/dp2"
train tp2sp 2 "${C[@]}" --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4 \
  --set output.dir="$WORK/tp2sp"
train pp2 2 "${C[@]}" --set parallel.pp=2 --set train.micro_batch=2 --set output.dir="$WORK/pp2"
train dp2z3 2 "${C[@]}" --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2 \
  --set output.dir="$WORK/dp2z3"
train all8 8 "${C[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true \
  --set parallel.pp=2 --set parallel.zero=1 --set train.micro_batch=2 --set output.dir="$WORK/all8"

python3 "$CMP" "$WORK/one" "$WORK/dp2" "$WORK/tp2sp" "$WORK/pp2" "$WORK/dp2z3" "$WORK/all8" \
  --rtol 1e-4 --steps 10
python3 - "$WORK" <<'PY'
import json, sys
for run, axis in (("dp2", "dp"), ("tp2sp", "tp"), ("pp2", "pp")):
    d = json.load(open("%s/%s/summary.json" % (sys.argv[1], run)))["device"]
    want = "staged" if d["gpus_shared"] else "nccl"
    if d[axis] != want:
        sys.exit("FAIL: %s: %s went %s with gpus_shared %d" % (run, axis, d[axis], d["gpus_shared"]))
    print("%s: %s %s (gpus_shared %d)" % (run, axis, d[axis], d["gpus_shared"]))
PY
echo PASS
