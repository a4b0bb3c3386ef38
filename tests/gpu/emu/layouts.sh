# meshtrain on emulated GPUs, one per rank, in the layouts that move device
# buffers over every kind of group: dp 2, tp 2 with sequence parallelism,
# pp 2 (1F1B), cp 2 (ring), ep 2 (a MoE model), dp 2 with ZeRO-3, the
# tiny Llama with one key/value head at tp 2 with sp (the head on both
# ranks, its gradients summed over tp on the device), and documents at cp 2
# (ring with learned positions, Ulysses with rotary ones). Each:
#   - every step's loss within 1e-4 relative of the same layout on the CPU
#     backend (fp32 both; summation orders differ), and every rank's
#     gradients of step 1 (the norm, each tensor part's sums: tests/scripts/
#     grad_check.py) the CPU's (ep 2: a MoE model routing top-2);
#   - summary.json's device.groups: every group that carries device traffic
#     in that layout has an NCCL communicator on every rank and took the
#     direct path ("nccl", calls > 0), and no device call anywhere was
#     staged through host MPI;
# run with MT_EMU_NCCL_INFLIGHT=1: one NCCL operation at a time on each
# GPU, started in the order issued (the pessimistic GPU, on which calls
# issued in a different order on different ranks deadlock).
# And GPU sharing decided by UUID: dp 2 with one visible GPU per rank
# (CUDA_VISIBLE_DEVICES per rank, as Slurm's --gpus-per-task=1: both ranks
# see device 0) is not shared and goes over NCCL; two ranks on one GPU are
# shared, staged, and say so.
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 300000)
C=(--set model.preset=tiny --set train.steps=3 --set train.global_batch=8
   --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none)
MOE=(--set model.moe_experts=4 --set model.moe_topk=2 --set model.moe_every=1
     --set model.moe_shared=1 --set model.moe_capacity=1.25 --set train.moe_aux_coef=0.01
     --set train.moe_z_coef=0.001)
check() { # NAME EXPECT(groups with device traffic, comma-separated) [SHARED]
  python3 - "$WORK" "$1" "$2" "${3:-0}" <<'PY' || fail "$1: device paths"
import json, sys
work, name, expect, shared = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
d = json.load(open("%s/%s/summary.json" % (work, name)))["device"]
g = d["groups"]
paths = " ".join("%s=%s(%d)" % (k, v["path"], v["direct_calls"] + v["staged_calls"])
                 for k, v in g.items() if v["path"] != "none")
print("     %-12s device: %s; gpus_shared %d" % (name, paths, d["gpus_shared"]))
bad = []
if d["gpus_shared"] != shared: bad.append("gpus_shared %d, want %d" % (d["gpus_shared"], shared))
for k in expect:
    want = "staged" if shared else "nccl"
    if g[k]["path"] != want or g[k]["communicator"] != ("staged" if shared else "nccl"):
        bad.append("%s: path %s, communicator %s (want %s)" % (k, g[k]["path"],
                                                               g[k]["communicator"], want))
for k, v in g.items():
    if k not in expect and v["path"] != "none": bad.append("%s carried device traffic too" % k)
    if not shared and v["staged_calls"]: bad.append("%s staged %d device calls" % (k, v["staged_calls"]))
if bad: sys.exit("FAIL: %s: %s" % (name, "; ".join(bad)))
PY
}
# NAME NP EXPECT ARGS...: the emulated GPUs and the CPU, then compare
layout() {
  local name=$1 np=$2 expect=$3; shift 3
  MT_EMU_NCCL_INFLIGHT=1 MT_TEST_GRAD_SUMS="$WORK/$name.grads" train "$name" "$np" "${C[@]}" "$@" \
    --set train.device=cuda --set output.dir="$WORK/$name"
  MT_TEST_GRAD_SUMS="$WORK/$name.cpu.grads" train "$name.cpu" "$np" "${C[@]}" "$@" \
    --set output.dir="$WORK/$name.cpu"
  python3 "$CMP" "$WORK/$name.cpu" "$WORK/$name" --rtol 1e-4 --steps 3 || fail "$name: losses"
  grad_check "$WORK/$name.cpu" "$WORK/$name" fp32 "$name"
  check "$name" "$expect"
}
layout dp2 2 dp_cp --set parallel.dp=2 --set train.micro_batch=4
layout tp2sp 2 tp --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4
layout pp2 2 pp --set parallel.pp=2 --set parallel.schedule=1f1b --set train.micro_batch=2
layout cp2ring 2 cp,dp_cp --set parallel.cp=2 --set parallel.cp_mode=ring --set train.micro_batch=4
layout ep2moe 2 ep,dp_cp "${MOE[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=4
layout dp2z3 2 dp_cp --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=4
layout llamatp2sp 2 tp --set model.preset=tiny-llama --set model.n_kv_head=1 --set parallel.tp=2 \
  --set parallel.sp=true --set train.micro_batch=4
# documents (the corpus's lines): learned positions over the ring, rotary
# ones over Ulysses
DOCS=(--set data.documents=true --set data.eot=10 --set train.micro_batch=4)
layout docs_ring 2 cp,dp_cp "${DOCS[@]}" --set parallel.cp=2
layout docs_ulysses 2 cp,dp_cp "${DOCS[@]}" --set model.preset=tiny-llama --set parallel.cp=2 \
  --set parallel.cp_mode=ulysses
# one visible GPU per rank, each its own (CUDA_VISIBLE_DEVICES = the local rank)
mt_mpirun 2 bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"' _ \
  "$MT_BIN/meshtrain" "${C[@]}" --set parallel.dp=2 --set train.micro_batch=4 \
  --set train.device=cuda --set output.dir="$WORK/gpus_per_task" > "$WORK/gpus_per_task.log" 2>&1 ||
  { tail -20 "$WORK/gpus_per_task.log"; fail "run gpus_per_task failed"; }
grep -q "one GPU per rank" "$WORK/gpus_per_task.log" || fail "gpus_per_task: ranks taken as sharing a GPU"
check gpus_per_task dp_cp
# two ranks on one GPU: staged through host MPI, and reported so
MT_EMU_GPUS=1 train shared 2 "${C[@]}" --set parallel.dp=2 --set train.micro_batch=4 \
  --set train.device=cuda --set output.dir="$WORK/shared"
python3 "$CMP" "$WORK/dp2.cpu" "$WORK/shared" --rtol 1e-4 --steps 3 || fail "shared: losses"
check shared dp_cp 1
echo PASS
