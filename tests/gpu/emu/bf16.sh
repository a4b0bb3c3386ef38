# Mixed precision on the emulated GPU (train.precision = bf16): the CUDA
# backend's ops called on bf16 tensors (the weights' compute copy,
# activations, their gradients, tp/dp messages) over fp32 master weights,
# gradients and moments, as on the CPU. tiny, 10 steps:
#   - on one GPU, every step's loss within 1e-3 relative of the same run on
#     the CPU backend (bf16 both: the two backends round the same fp32
#     values, summed in other orders, so an element now and then rounds to
#     the neighbouring bf16; the CPU's layouts differ by up to 8.4e-5 for
#     the same reason, tests/scripts/bf16_layouts.sh), and within 2e-3 of
#     fp32 on the same GPU but never bit-equal (the bf16 path ran);
#   - rank 0's memory by category (parameters, gradients, optimizer,
#     activations) the CPU bf16 run's bytes exactly (the same tensors, so
#     the plan the CPU's bf16 runs are held to holds here too), and the
#     activations at most 0.55 of fp32's on the same GPU;
#   - summary.json names precision bf16 and gemm bf16, and with
#     MT_CUDA_OP_TIMES=1 its op_seconds time the ops on bf16 tensors;
#   - dp 2 reducing gradients in bf16 (parallel.grad_reduce_dtype = bf16)
#     and tp 2 with sequence parallelism holding the gradients in bf16
#     (train.grad_dtype = bf16: the fp32 slots of each piece rounded into
#     bf16 gradients in GPU memory, sp's partial gradients summed over tp
#     from bf16), one emulated GPU a rank: within
#     1e-3 of the same layout on the CPU, and the dp and tp groups' device
#     traffic went over NCCL, none of it staged through host MPI;
#   - in each of the three layouts, the gradients of step 1 (the norm and
#     every tensor part's sums, tests/scripts/grad_check.py at bf16's
#     tolerance) follow the CPU's bf16 run.
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
corpus=$(mt_corpus 400000)
C=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
   --set train.micro_batch=4 --set data.train="$corpus" --set train.eval_every=0
   --set ckpt.mode=none)
B=(--set train.precision=bf16)
train fp32 1 "${C[@]}" --set train.device=cuda --set train.precision=fp32 --set output.dir="$WORK/fp32"
MT_CUDA_OP_TIMES=1 MT_TEST_GRAD_SUMS="$WORK/bf16.grads" train bf16 1 "${C[@]}" "${B[@]}" --set train.device=cuda \
  --set output.dir="$WORK/bf16"
MT_TEST_GRAD_SUMS="$WORK/cpu16.grads" train cpu16 1 "${C[@]}" "${B[@]}" --set train.device=cpu --set output.dir="$WORK/cpu16"
DP=(--set parallel.dp=2 --set parallel.grad_reduce_dtype=bf16 --set train.micro_batch=2)
TP=(--set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=2
    --set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16)
MT_TEST_GRAD_SUMS="$WORK/dp2.grads" train dp2 2 "${C[@]}" "${B[@]}" "${DP[@]}" --set train.device=cuda --set output.dir="$WORK/dp2"
MT_TEST_GRAD_SUMS="$WORK/dp2cpu.grads" train dp2cpu 2 "${C[@]}" "${B[@]}" "${DP[@]}" --set train.device=cpu --set output.dir="$WORK/dp2cpu"
MT_TEST_GRAD_SUMS="$WORK/tp2.grads" train tp2 2 "${C[@]}" "${B[@]}" "${TP[@]}" --set train.device=cuda --set output.dir="$WORK/tp2"
MT_TEST_GRAD_SUMS="$WORK/tp2cpu.grads" train tp2cpu 2 "${C[@]}" "${B[@]}" "${TP[@]}" --set train.device=cpu --set output.dir="$WORK/tp2cpu"
python3 - "$WORK" <<'PY'
import json, math, sys
w = sys.argv[1]
def curve(d): return [json.loads(l)["loss"] for l in open("%s/%s/metrics.jsonl" % (w, d))]
def summary(d): return json.load(open("%s/%s/summary.json" % (w, d)))
def worst(ref, run, tol, what):
    a, b = curve(ref), curve(run)
    if not len(a) == len(b) == 10: sys.exit("FAIL: %s: %d and %d steps" % (what, len(a), len(b)))
    err = max(abs(x - y) / abs(x) if y is not None and math.isfinite(y) else math.inf
              for x, y in zip(a, b))
    print("%-34s max relative loss difference over 10 steps %.2e (tolerance %.0e)" % (what, err, tol))
    if not err <= tol: sys.exit("FAIL: %s" % what)
    return a == b
worst("cpu16", "bf16", 1e-3, "bf16 GPU against bf16 CPU")
if worst("fp32", "bf16", 2e-3, "bf16 GPU against fp32 GPU"):
    sys.exit("FAIL: bf16 gives fp32's losses bit for bit: the bf16 path did not run")
worst("dp2cpu", "dp2", 1e-3, "dp 2, bf16 reduction, GPU vs CPU")
worst("tp2cpu", "tp2", 1e-3, "tp 2 + sp, bf16 grads, GPU vs CPU")
d = summary("bf16")["device"]
if d["precision"] != "bf16" or d["gemm"] != "bf16": sys.exit("FAIL: device %s" % d)
calls = d.get("op_calls", {})
timed = sorted(k for k in calls if k.startswith("bf16 "))
print("MT_CUDA_OP_TIMES: %d bf16 ops timed, bf16 matmul_forward %d calls"
      % (len(timed), calls.get("bf16 matmul_forward", 0)))
if not calls.get("bf16 matmul_forward", 0) > 0 or not calls.get("bf16 attn_forward", 0) > 0:
    sys.exit("FAIL: the ops on bf16 tensors are not timed: %s" % sorted(calls))
g16, c16, g32 = (summary(r)["mem_peak_bytes_rank0"] for r in ("bf16", "cpu16", "fp32"))
for k in ("params", "grads", "optimizer", "activations"):
    if g16[k] != c16[k]: sys.exit("FAIL: %s: %d bytes on the GPU, %d on the CPU" % (k, g16[k], c16[k]))
ratio = g16["activations"] / g32["activations"]
print("memory by category as the CPU's bf16 run; activations %d bytes, %.3f of fp32's"
      % (g16["activations"], ratio))
if not ratio <= 0.55: sys.exit("FAIL: activations %.3f of fp32's" % ratio)
for run, group in (("dp2", "dp_cp"), ("tp2", "tp")):
    gr = summary(run)["device"]["groups"]
    staged = sum(v["staged_calls"] for v in gr.values())
    print("%-4s %s group: path %s, %d direct calls; %d device calls staged in all"
          % (run, group, gr[group]["path"], gr[group]["direct_calls"], staged))
    if gr[group]["path"] != "nccl" or staged: sys.exit("FAIL: %s: device traffic %s" % (run, gr))
PY
grad_check "$WORK/cpu16" "$WORK/bf16" bf16 "bf16 GPU against bf16 CPU"
grad_check "$WORK/dp2cpu" "$WORK/dp2" bf16 "dp 2, bf16 reduction, GPU vs CPU"
grad_check "$WORK/tp2cpu" "$WORK/tp2" bf16 "tp 2 + sp, bf16 grads, GPU vs CPU"
echo PASS
