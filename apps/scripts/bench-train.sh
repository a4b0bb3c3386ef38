#!/usr/bin/env bash
# Training throughput of `small` against sgemm measured in the same run.
#   apps/scripts/bench-train.sh [STEPS]
# Prints: tokens/s on 1 rank x 2 threads; achieved training FLOP/s divided by
# meshbench gemm's weighted GFLOP/s at the model's shapes (2 threads); and
# dp=2 x 1 thread against 1 rank x 2 threads (tokens/s ratio).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/setup.sh build
source apps/scripts/env.sh build
STEPS=${1:-12}
OUT=outputs/bench-train
rm -rf "$OUT"; mkdir -p "$OUT" inputs/data
[ -f inputs/data/corpus.txt ] || build/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
common=(inputs/default.ini --set model.preset=small --set model.seq_len=256 --set train.steps="$STEPS"
        --set train.global_batch=16 --set train.micro_batch=8 --set train.eval_every=0 --set train.log_every=1000)
gemm() { build/bin/meshbench gemm --model small --threads 2 --tokens 2048 --reps 5 --json "$OUT/gemm.jsonl" | tail -1; }
gemm
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "${launcher[@]}" -n 1 build/bin/meshtrain "${common[@]}" \
  --set parallel.dp=1 --set train.threads=2 --set output.dir="$OUT/dp1x2" | tail -1
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${launcher[@]}" -n 2 build/bin/meshtrain "${common[@]}" \
  --set parallel.dp=2 --set train.threads=1 --set output.dir="$OUT/dp2x1" | tail -1
gemm
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
g = [json.loads(l)["gflops_weighted"] for l in open(out + "/gemm.jsonl")]
gemm = sum(g) / len(g)
s1 = json.load(open(out + "/dp1x2/summary.json"))
s2 = json.load(open(out + "/dp2x1/summary.json"))
f1 = s1["flops_per_s"] / 1e9
print("sgemm at small's shapes, 2 threads: %.1f GFLOP/s (before %.1f, after %.1f)" % (gemm, g[0], g[-1]))
print("1 rank x 2 threads: %.0f tokens/s, %.1f GFLOP/s training, ratio to sgemm %.3f (goal >= 0.6)"
      % (s1["tokens_per_s"], f1, f1 / gemm))
print("dp=2 x 1 thread:    %.0f tokens/s, ratio to 1 rank x 2 threads %.3f (goal >= 0.85)"
      % (s2["tokens_per_s"], s2["tokens_per_s"] / s1["tokens_per_s"]))
PY
