#!/usr/bin/env bash
# Mixed precision (train.precision = bf16) against fp32, figures for the
# issue's note, in one run (the machine may be shared: the load is printed
# before and after; every ratio is of two figures measured here, now).
#   apps/scripts/bench-mp.sh [BUILD_DIR] [STEPS_SMALL] [STEPS_GPT2]
# 1. Bytes per parameter by category (meshtrain --plan: no MPI, nothing
#    timed) for gpt2-124m, a 7B (L=32, C=4096, T=2048) and a GPT-3 175B
#    shape (L=96, C=12288, T=2048) at ZeRO 0-3 over dp = 64, fp32 and bf16,
#    beside the ZeRO paper's 2 + 2 + 12 (fp16 weights and gradients, fp32
#    master and Adam moments; K = 12): 16, 4 + 12/N, 2 + 14/N, 16/N.
#    Activations are per token, not per parameter: left out. bf16g: bf16
#    with the gradients held in bf16 (train.grad_dtype = bf16).
# 2. One rank, 2 threads, each pinned to its own core: small at T=256,
#    gpt2-124m and llama-124m at T=1024, micro-batch 4, fp32 then bf16: tokens/s (median
#    of steps 2..), bf16/fp32; training FLOP/s (metrics' flops_per_s, the
#    model's 6N + attention FLOPs) over the FLOP/s of the bf16 GEMM path
#    at the model's shapes (meshbench gemm-bf16, same threads, same run);
#    peak memory per category bf16/fp32 (summary.json, rank 0).
#    CLOCK=cpu in the environment (for a machine other jobs share): every
#    rate per CPU second of the process divided by its 2 threads (/usr/bin/
#    time; the whole run, set-up and the first step included) and the GEMM
#    timed with meshbench's --clock cpu; default wall: the median of steps
#    2.. as meshtrain records them, the GEMM on the wall clock.
# Writes outputs/bench-mp/ (runs, gemm-bf16.jsonl, bytes.json). PARTS=1 or
# PARTS=2 in the environment runs one part only.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
STEPS_SMALL=${2:-12}
STEPS_GPT2=${3:-4}
BIN=$BUILD/bin
OUT=outputs/bench-mp
CLOCK=${CLOCK:-wall}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_PLACES=cores OMP_PROC_BIND=close OMP_WAIT_POLICY=passive

PARTS=${PARTS:-12}
if [[ $PARTS == *1* ]]; then
echo "== 1. bytes per parameter (meshtrain --plan), dp = 64"
rm -f "$OUT"/plan-*.json "$OUT/bytes.json"
python3 - "$BIN" "$OUT" <<'PY'
import json, subprocess, sys
bindir, out = sys.argv[1:3]
N = 64
models = {"gpt2-124m": ["model.preset=gpt2-124m"],
          "7B": ["model.preset=gpt2-124m", "model.n_layer=32", "model.n_embd=4096", "model.n_head=32",
                 "model.seq_len=2048"],
          "175B": ["model.preset=gpt2-124m", "model.n_layer=96", "model.n_embd=12288",
                   "model.n_head=96", "model.seq_len=2048"]}
paper = {0: 16.0, 1: 4 + 12.0 / N, 2: 2 + 14.0 / N, 3: 16.0 / N}
cats = ["params", "grads", "optimizer", "gathered", "comm"]
rows = []
print("%-9s %4s %5s | %7s %7s %7s %8s %7s | %7s | %7s" % ("model", "zero", "prec", *cats, "total",
                                                           "ZeRO pp"))
for name, sets in models.items():
    for zero in range(4):
        for prec in ("fp32", "bf16", "bf16g"):
            g16 = ["train.grad_dtype=bf16", "parallel.grad_reduce_dtype=bf16"] if prec == "bf16g" else []
            args = sum((["--set", s] for s in sets + g16 + [
                "parallel.dp=%d" % N, "parallel.zero=%d" % zero, "train.global_batch=%d" % N,
                "train.micro_batch=1", "train.precision=%s" % prec[:4]]), [])
            pj = "%s/plan-%s-z%d-%s.json" % (out, name, zero, prec)
            subprocess.run([bindir + "/meshtrain", "--plan", "--plan-json", pj] + args, check=True,
                           capture_output=True)
            plan = json.load(open(pj))
            P = plan["params"]
            mem = plan["ranks"][0]["mem_bytes"]
            b = {c: mem[c] / P for c in cats}
            tot = sum(b.values())
            rows.append({"model": name, "zero": zero, "precision": prec, "params": P,
                         "bytes_per_param": b, "total": tot, "zero_paper": paper[zero]})
            print("%-9s %4d %5s | %7.3f %7.3f %7.3f %8.3f %7.3f | %7.3f | %7.3f" % (
                name, zero, prec, *[b[c] for c in cats], tot, paper[zero]))
json.dump(rows, open(out + "/bytes.json", "w"), indent=1)
print("(bytes this rank holds per model parameter, rank 0 of %d; ZeRO pp: the ZeRO paper's "
      "2+2+12 at the same stage; bf16g: bf16 with train.grad_dtype = bf16)" % N)
PY
fi
[[ $PARTS == *2* ]] || exit 0

echo
echo "== 2. one rank x 2 threads: fp32 and bf16 training, bf16 GEMM at the same shapes"
echo "clock: $CLOCK; load before: $(uptime)"
rm -rf "$OUT"/small_* "$OUT"/gpt2_* "$OUT"/llama_* "$OUT"/gemm-*
corpus="$OUT/corpus.txt"
"$BIN/meshdata" corpus "$corpus" --bytes 2000000 >/dev/null
train() { # NAME STEPS ARGS...
  local name=$1 steps=$2; shift 2
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 taskset -c 0-1 \
    /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" \
    mpirun --oversubscribe --bind-to none -n 1 "$BIN/meshtrain" --set data.train="$corpus" \
    --set train.global_batch=4 --set train.micro_batch=4 --set train.steps="$steps" \
    --set train.eval_every=0 --set ckpt.mode=none --set train.threads=2 \
    --set output.dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 \
    || { cat "$OUT/$name.log"; echo "run $name failed"; exit 1; }
}
gemm() { # MODEL TOKENS
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 taskset -c 0-1 \
    "$BIN/meshbench" gemm-bf16 --threads 2 --model "$1" --tokens "$2" --reps 5 --clock "$CLOCK" \
    --json "$OUT/gemm-bf16.jsonl" > "$OUT/gemm-$1.txt"
}
for prec in fp32 bf16; do train "small_$prec" "$STEPS_SMALL" --set model.preset=small \
  --set model.seq_len=256 --set train.precision=$prec; done
gemm small 1024
for prec in fp32 bf16; do train "gpt2_$prec" "$STEPS_GPT2" --set model.preset=gpt2-124m \
  --set train.precision=$prec; done
gemm gpt2-124m 4096
for prec in fp32 bf16; do train "llama_$prec" "$STEPS_GPT2" --set model.preset=llama-124m \
  --set train.precision=$prec; done
gemm llama-124m 4096
echo "load after: $(uptime)"
python3 - "$OUT" "$CLOCK" <<'PY'
import json, statistics, sys
out, clock = sys.argv[1:3]
gemm = {json.loads(l)["model"]: json.loads(l) for l in open(out + "/gemm-bf16.jsonl")}
def run(name):
    recs = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (out, name))]
    summ = json.load(open("%s/%s/summary.json" % (out, name)))
    mem = summ["mem_peak_bytes_rank0"]
    if clock == "cpu":  # tokens and FLOPs of the whole run over its CPU seconds per thread
        _, user, sys_ = map(float, open("%s/%s.time" % (out, name)).read().split()[-3:])
        per_thread = (user + sys_) / 2
        tokens = sum(r["tokens"] for r in recs)
        return tokens / per_thread, tokens * summ["flops_per_token"] / per_thread, mem
    later = recs[1:] if len(recs) > 1 else recs
    return (statistics.median(r["tokens_per_s"] for r in later),
            statistics.median(r["flops_per_s"] for r in later), mem)
cats = ["params", "grads", "optimizer", "activations", "comm"]
for model, gname, T in (("small", "small", 256), ("gpt2", "gpt2-124m", 1024),
                        ("llama", "llama-124m", 1024)):
    t32, f32, m32 = run(model + "_fp32")
    t16, f16, m16 = run(model + "_bf16")
    g = gemm[gname]
    path = g["default_path"]
    gb16 = g["step_gflops_" + path] * 1e9
    gf32 = g["step_gflops_fp32"] * 1e9
    print("\n%s T=%d, micro-batch 4, 1 rank x 2 threads (%s clock):" % (gname, T, clock))
    print("  tokens/s      fp32 %9.1f  bf16 %9.1f  bf16/fp32 %.3f (goal >= 2.5 on AVX512-BF16, "
          ">= 3 on AMX)" % (t32, t16, t16 / t32))
    print("  training GFLOP/s fp32 %7.1f  bf16 %7.1f" % (f32 / 1e9, f16 / 1e9))
    print("  GEMM GFLOP/s at the model's shapes: fp32 sgemm %.1f, bf16 (%s path) %.1f" % (
        gf32 / 1e9, path, gb16 / 1e9))
    print("  bf16 training FLOP/s over bf16 GEMM FLOP/s: %.3f (goal >= 0.8); fp32 over sgemm: %.3f "
          "(goal >= 0.85)" % (f16 / gb16, f32 / gf32))
    print("  peak memory, bf16/fp32:  " + "  ".join(
        "%s %.3f" % (c, m16[c] / m32[c]) if m32[c] else "%s -" % c for c in cats))
    print("  peak memory MiB fp32:    " + "  ".join("%s %.1f" % (c, m32[c] / 2**20) for c in cats))
    print("  peak memory MiB bf16:    " + "  ".join("%s %.1f" % (c, m16[c] / 2**20) for c in cats))
PY
