#!/usr/bin/env bash
# ZeRO 0-3 on `small` at dp = 2 (2 ranks x 1 thread): mean step time of each
# level over ZeRO-1's, measured in the same run (rounds interleaved, the
# median round counted), and each level's peak memory per rank by category
# from the allocator, beside the plan's prediction.
#   apps/scripts/bench-zero.sh [STEPS] [ROUNDS]
source "$(dirname "$0")/bench_common.sh" zero
STEPS=${1:-12}; ROUNDS=${2:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(inputs/default.ini --set model.preset=small --set train.steps="$STEPS" --set parallel.dp=2
        --set train.global_batch=16 --set train.micro_batch=4 --set train.eval_every=0
        --set ckpt.mode=none --set train.log_every=1000)
for r in $(seq 1 "$ROUNDS"); do
  for z in 0 1 2 3; do
    "${launcher[@]}" -n 2 build/bin/meshtrain "${common[@]}" --set parallel.zero=$z \
      --set output.dir="$OUT/r$r-z$z" > "$OUT/r$r-z$z.log" 2>&1 || { cat "$OUT/r$r-z$z.log"; exit 1; }
    [ "$r" = 1 ] && build/bin/meshtrain "${common[@]}" --set parallel.zero=$z --plan-json "$OUT/plan-z$z.json" > /dev/null
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
cats = ["params", "grads", "optimizer", "gathered", "activations", "comm"]
t = {z: [json.load(open("%s/r%d-z%d/summary.json" % (out, r, z)))["mean_step_s"]
         for r in range(1, rounds + 1)] for z in range(4)}
# per round, each level over zero 1 of the same round; the median of those ratios
ratio = {z: statistics.median(t[z][i] / t[1][i] for i in range(rounds)) for z in range(4)}
print("small, dp=2 x 1 thread, global batch 16 x 128 tokens, micro-batch 4 (2 accumulation steps)")
print("%-6s %10s %10s | peak MiB per rank (rank 0): %s | total (plan)" % ("zero", "step s", "/ zero 1",
      " ".join("%9s" % c for c in cats)))
for z in range(4):
    s = json.load(open("%s/r1-z%d/summary.json" % (out, z)))
    m = s["ranks"][0]["mem_peak_bytes"]
    plan = json.load(open("%s/plan-z%d.json" % (out, z)))["ranks"][0]["mem_bytes"]
    tot, ptot = sum(m[c] for c in cats), sum(plan[c] for c in cats)
    print("%-6d %10.3f %10.3f | %s | %.1f (%.1f)" % (z, statistics.median(t[z]), ratio[z],
          " ".join("%9.2f" % (m[c] / 1048576) for c in cats), tot / 1048576, ptot / 1048576))
print("goals: zero 2 / zero 1 <= 1.10 (got %.3f), zero 3 / zero 1 <= 1.25 (got %.3f)" % (ratio[2], ratio[3]))
PY
