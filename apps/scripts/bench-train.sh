#!/usr/bin/env bash
# Training throughput against sgemm measured in the same run, on one rank
# launched so that both threads get a core (mpirun --bind-to none).
#   apps/scripts/bench-train.sh [STEPS] [ROUNDS]
# Shapes: small at T = 256 and T = 1024, and the tiny config of issue 12
# (L=4, C=256, H=4, T=256, V=256), each with 2048 tokens per micro-batch.
# Per shape and round (rounds interleave, medians printed): meshbench gemm at
# the model's matmul shapes on 2 threads (before and after the runs), the
# run on 1 rank x 2 threads and on 1 rank x 1 thread. Prints the training
# FLOP/s over the gemm FLOP/s (goal >= 0.75), 2 threads over 1 thread
# (goal >= 1.7x), and for small at T = 256 dp = 2 x 1 thread against
# 1 rank x 2 threads. Also the load average before and after: the machine is
# shared, figures taken under load are lower.
source "$(dirname "$0")/bench_common.sh" train --bind-to none
STEPS=${1:-10}; ROUNDS=${2:-3}
common=(inputs/default.ini --set train.steps="$STEPS" --set train.eval_every=0
        --set train.log_every=1000 --set ckpt.mode=none)
# name | meshtrain keys | meshbench gemm shape
shapes=("small256|--set model.preset=small --set model.seq_len=256 --set train.global_batch=16 --set train.micro_batch=8|--model small"
        "small1024|--set model.preset=small --set model.seq_len=1024 --set train.global_batch=4 --set train.micro_batch=2|--model small"
        "tiny4x256|--set model.preset=custom --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4 --set model.seq_len=256 --set model.vocab_size=256 --set train.global_batch=16 --set train.micro_batch=8|--model small --n-layer 4 --n-embd 256")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
for r in $(seq 1 "$ROUNDS"); do
  for s in "${shapes[@]}"; do
    IFS='|' read -r name keys gemm <<< "$s"
    # shellcheck disable=SC2086
    g() { build/bin/meshbench gemm $gemm --threads 2 --tokens 2048 --reps 5 --json "$OUT/$name-gemm.jsonl" > /dev/null; }
    g
    for th in 2 1; do
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th "${launcher[@]}" -n 1 build/bin/meshtrain \
        "${common[@]}" $keys --set parallel.dp=1 --set train.threads=$th \
        --set output.dir="$OUT/r$r-$name-t$th" > "$OUT/r$r-$name-t$th.log" 2>&1 \
        || { cat "$OUT/r$r-$name-t$th.log"; exit 1; }
    done
    g
  done
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${launcher[@]}" -n 2 build/bin/meshtrain "${common[@]}" \
    --set model.preset=small --set model.seq_len=256 --set train.global_batch=16 \
    --set train.micro_batch=8 --set parallel.dp=2 --set train.threads=1 \
    --set output.dir="$OUT/r$r-dp2x1" > "$OUT/r$r-dp2x1.log" 2>&1 || { cat "$OUT/r$r-dp2x1.log"; exit 1; }
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def summ(path):
    return json.load(open(path + "/summary.json"))
for name in ("small256", "small1024", "tiny4x256"):
    gemm = [json.loads(l)["gflops_weighted"] for l in open("%s/%s-gemm.jsonl" % (out, name))]
    ratio, scale, f2, f1 = [], [], [], []
    for r in range(1, rounds + 1):
        s2, s1 = summ("%s/r%d-%s-t2" % (out, r, name)), summ("%s/r%d-%s-t1" % (out, r, name))
        g = (gemm[2 * r - 2] + gemm[2 * r - 1]) / 2  # this round's gemm, before and after
        f2.append(s2["flops_per_s"] / 1e9); f1.append(s1["flops_per_s"] / 1e9)
        ratio.append(f2[-1] / g); scale.append(s2["tokens_per_s"] / s1["tokens_per_s"])
    print("%-10s gemm %6.1f GFLOP/s (2 threads) | train 2 threads %6.1f GFLOP/s, 1 thread %6.1f | "
          "train/gemm %.3f (goal >= 0.75) | 2 threads / 1 thread %.2fx (goal >= 1.7); medians of %d "
          "rounds, per round %s"
          % (name, med(gemm), med(f2), med(f1), med(ratio), med(scale), rounds,
             " ".join("%.3f/%.2fx" % (a, b) for a, b in zip(ratio, scale))))
dp2 = [summ("%s/r%d-dp2x1" % (out, r))["tokens_per_s"] /
       summ("%s/r%d-small256-t2" % (out, r))["tokens_per_s"] for r in range(1, rounds + 1)]
print("small256   dp=2 x 1 thread / 1 rank x 2 threads: %.3f (median of %d)" % (med(dp2), rounds))
PY
