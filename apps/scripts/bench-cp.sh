#!/usr/bin/env bash
# Long context on `small` at T = 4096: context parallelism over 2 ranks (ring
# and Ulysses, 1 thread each) against one rank with 2 threads (launched with
# --bind-to none: both use the machine's 2 cores either way). Prints tokens/s
# (median of ROUNDS interleaved rounds, the first step of each run left out as
# warm-up), the ratio to cp = 1, the peak memory per rank by category (the
# allocator's, summary.json) and the bytes a rank sends over cp per step.
#   apps/scripts/bench-cp.sh [STEPS] [ROUNDS] [SEQ_LEN]
source "$(dirname "$0")/bench_common.sh" cp --bind-to none
STEPS=${1:-3}; ROUNDS=${2:-3}; T=${3:-4096}
common=(inputs/default.ini --set model.preset=small --set model.seq_len="$T" --set train.steps="$STEPS"
        --set train.global_batch=2 --set train.micro_batch=1 --set parallel.dp=1
        --set train.eval_every=0 --set train.log_every=1000 --set ckpt.mode=none)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "${launcher[@]}" -n 1 build/bin/meshtrain "${common[@]}" \
    --set train.threads=2 --set output.dir="$OUT/r$r-cp1" > "$OUT/r$r-cp1.log" 2>&1 \
    || { cat "$OUT/r$r-cp1.log"; exit 1; }
  for mode in ring ulysses; do
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${launcher[@]}" -n 2 build/bin/meshtrain "${common[@]}" \
      --set train.threads=1 --set parallel.cp=2 --set parallel.cp_mode=$mode \
      --set output.dir="$OUT/r$r-$mode" > "$OUT/r$r-$mode.log" 2>&1 || { cat "$OUT/r$r-$mode.log"; exit 1; }
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
python3 - "$OUT" "$ROUNDS" "$T" <<'PY'
import json, statistics, sys
out, rounds, T = sys.argv[1], int(sys.argv[2]), sys.argv[3]
MiB = 1048576.0
def summ(run):
    return json.load(open("%s/%s/summary.json" % (out, run)))
base = statistics.median(summ("r%d-cp1" % r)["tokens_per_s"] for r in range(1, rounds + 1))
print("small, T = %s, global batch 2 x %s tokens, medians of %d rounds" % (T, T, rounds))
for name, label in (("cp1", "cp=1 (1 rank x 2 threads)"), ("ring", "cp=2 ring (2 x 1)"),
                    ("ulysses", "cp=2 ulysses (2 x 1)")):
    tok = statistics.median(summ("r%d-%s" % (r, name))["tokens_per_s"] for r in range(1, rounds + 1))
    s = summ("r1-" + name)
    worst = max(s["ranks"], key=lambda x: sum(x["mem_peak_bytes"].values()))
    m = worst["mem_peak_bytes"]
    print("%-27s %8.1f tokens/s (%.2fx cp=1) | peak per rank %7.1f MiB: activations %7.1f, "
          "params+grads+optimizer %6.1f, comm %5.1f | cp bytes per step %.1f MB"
          % (label, tok, tok / base, sum(m.values()) / MiB, m["activations"] / MiB,
             (m["params"] + m["grads"] + m["optimizer"]) / MiB, m["comm"] / MiB,
             worst["last_step_bytes"]["cp"] / 1e6))
PY
