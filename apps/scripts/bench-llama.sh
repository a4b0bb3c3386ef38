#!/usr/bin/env bash
# Llama blocks on the CPU and on the virtual device.
#   apps/scripts/bench-llama.sh [STEPS] [ROUNDS] [cpu|virtual|all] [MODELS]
# (MODELS: a regular expression of the virtual device's models, default all)
# CPU: llama-124m (GPT-2 124M's width, depth and vocabulary with Llama
# blocks) and gpt2-124m beside it, at T = 1024, one rank launched so that
# both threads get a core (--bind-to none), fp32 and bf16, micro-batch 1,
# global batch 4. Per round, before and after the runs, meshbench gemm-bf16
# at gpt2-124m's matmul shapes (the same width, 1024 rows, 2 threads): the
# bf16 GEMM FLOP/s of the CPU's default bf16 path and fp32 sgemm's. Prints
# per model and precision the median tokens/s and training FLOP/s (the run's
# flops_per_s: 6 N + attention per token, N the matmul weights a token uses)
# over the bf16 GEMM FLOP/s measured in the same round, and the CPU.
# Virtual device: llama3-8b FSDP-style (ZeRO-3) on 64 GPUs
# on the profiles leonardo-booster and h100-sxm, llama3-70b on 256
# of leonardo-booster, mixtral-8x7b on 64 of both; T = 8192, global batch
# 512 sequences, bf16: the layout meshplan predicts fastest (the dense
# models: its whole search, among the ZeRO-3 layouts for the 8B; Mixtral:
# a grid of layouts with ep, each priced by meshplan --only, since the
# search with ep does not finish in 20 minutes on 2 cores), then that layout
# run on the virtual device for 2 steps (a byte corpus of 6 MB: enough
# sequences for a global batch): its step time, tokens/s per GPU and MFU
# against meshplan's.
source "$(dirname "$0")/bench_common.sh" llama --bind-to none
STEPS=${1:-4}; ROUNDS=${2:-3}; WHAT=${3:-all}; MODELS=${4:-.}
cpu_model=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
flags=$(grep -m1 "^flags" /proc/cpuinfo)
isa=$( (echo "$flags" | grep -q amx_bf16 && echo "AMX-BF16") ||
       (echo "$flags" | grep -q avx512_bf16 && echo "AVX512-BF16") || echo "no bf16 instructions")
echo "CPU: $cpu_model ($isa), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$OUT/cpu.txt"
if [ "$WHAT" != virtual ]; then
  common=(inputs/default.ini --set model.seq_len=1024 --set train.steps="$STEPS"
          --set train.global_batch=4 --set train.micro_batch=1 --set train.eval_every=0
          --set train.log_every=1000 --set ckpt.mode=none --set parallel.dp=1 --set train.threads=2)
  g() { build/bin/meshbench gemm-bf16 --model gpt2-124m --tokens 1024 --threads 2 --reps 3 \
          --json "$OUT/gemm.jsonl" > /dev/null; }
  for r in $(seq 1 "$ROUNDS"); do
    g
    for m in llama-124m gpt2-124m; do
      for p in fp32 bf16; do
        OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "${launcher[@]}" -n 1 build/bin/meshtrain \
          "${common[@]}" --set model.preset=$m --set train.precision=$p \
          --set output.dir="$OUT/r$r-$m-$p" > "$OUT/r$r-$m-$p.log" 2>&1 \
          || { cat "$OUT/r$r-$m-$p.log"; exit 1; }
      done
    done
    g
  done
  python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
gemm = [json.loads(l) for l in open(out + "/gemm.jsonl")]
for m in ("llama-124m", "gpt2-124m"):
    for p in ("fp32", "bf16"):
        tok, fl, rb, rf = [], [], [], []
        for r in range(1, rounds + 1):
            s = json.load(open("%s/r%d-%s-%s/summary.json" % (out, r, m, p)))
            g0, g1 = gemm[2 * r - 2], gemm[2 * r - 1]
            path = g0["default_path"]
            gb = (g0["step_gflops_" + path] + g1["step_gflops_" + path]) / 2
            gf = (g0["step_gflops_fp32"] + g1["step_gflops_fp32"]) / 2
            tok.append(s["tokens_per_s"]); fl.append(s["flops_per_s"] / 1e9)
            rb.append(fl[-1] / gb); rf.append(fl[-1] / gf)
        print("%-10s %s: %7.0f tokens/s, %6.1f GFLOP/s training | / bf16 GEMM (%s) %.3f | / fp32 "
              "sgemm %.3f; medians of %d rounds (per round %s)"
              % (m, p, med(tok), med(fl), path, med(rb), med(rf), rounds,
                 " ".join("%.3f" % x for x in rb)))
PY
fi
[ "$WHAT" = cpu ] && exit 0
# the virtual device: meshplan's best layout (apps/scripts/best-layout.py),
# then that layout emulated
vkeys=(--set model.seq_len=8192 --set train.global_batch=512 --set train.precision=bf16)
build/bin/meshdata corpus "$OUT/corpus6m.txt" --bytes 6000000 > /dev/null
for job in "llama3-8b leonardo-booster 64 --zero=3" "llama3-8b h100-sxm 64 --zero=3" \
           "llama3-70b leonardo-booster 256" \
           "mixtral-8x7b leonardo-booster 64 --grid --experts=8 --layers=32" \
           "mixtral-8x7b h100-sxm 64 --grid --experts=8 --layers=32"; do
  read -r model hw ranks how <<< "$job"
  [[ $model =~ $MODELS ]] || continue
  name=$model-$hw
  # shellcheck disable=SC2086
  python3 apps/scripts/best-layout.py --hw "$hw" --ranks "$ranks" $how --json "$OUT/$name.plan.json" \
    -- model.preset="$model" model.seq_len=8192 train.global_batch=512 train.precision=bf16 \
    > "$OUT/$name.keys" || exit 1
  # shellcheck disable=SC2046,SC2086
  "${launcher[@]}" -n "$ranks" build/bin/meshtrain inputs/default.ini \
    --set model.preset="$model" "${vkeys[@]}" $(cat "$OUT/$name.keys") --set train.steps=2 \
    --set train.device=virtual --set train.virtual_hw="$hw" --set ckpt.mode=none \
    --set train.eval_every=0 --set data.train="$OUT/corpus6m.txt" \
    --set output.dir="$OUT/$name" > "$OUT/$name.log" 2>&1 \
    || { tail -20 "$OUT/$name.log"; exit 1; }
  python3 - "$OUT/$name" "$OUT/$name.plan.json" "$ranks" "$hw" "$model" \
    "$(cat "$OUT/$name.keys")" <<'PY'
import json, sys
run, plan, ranks, hw, model, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:]
last = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"step"' in l][-1]
best = json.load(open(plan))
print("%-12s %-16s %3d GPUs: virtual step %.2f s, %.0f tokens/s per GPU, MFU %.1f%% | meshplan "
      "%.2f s, MFU %.1f%% (best of %d layouts) | %s"
      % (model, hw, ranks, last["step_s"], last["tokens_per_s"] / ranks, 100 * last["mfu"],
         best["step_s"], 100 * best["mfu"], best["layouts_priced"], keys.replace("--set ", "")))
PY
done
