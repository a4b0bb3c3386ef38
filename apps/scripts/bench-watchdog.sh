#!/usr/bin/env bash
# The watchdog's and flight recorder's cost on a training step: `small` on
# 1, 4 and 8 ranks (dp, 1 thread each), train.collective_timeout_s = 900
# (on) against 0 (off: no recorder, no thread), rounds interleaved, the
# median of the per-round ratios on / off; then the size of a flight record
# holding a full ring (a stall at the last step).
#   apps/scripts/bench-watchdog.sh [STEPS] [ROUNDS]
# Ranks beyond the machine's cores share them (say so with the figures).
source "$(dirname "$0")/bench_common.sh" watchdog
STEPS=${1:-8}; ROUNDS=${2:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(inputs/default.ini --set model.preset=small --set train.steps="$STEPS"
        --set train.global_batch=8 --set train.micro_batch=1 --set train.eval_every=0
        --set ckpt.mode=none --set train.log_every=1000 --set train.threads=1)
for np in 1 4 8; do
  for r in $(seq 1 "$ROUNDS"); do
    for t in 900 0; do
      d="$OUT/np$np-r$r-t$t"
      "${launcher[@]}" -n $np build/bin/meshtrain "${common[@]}" --set parallel.dp=$np \
        --set train.collective_timeout_s=$t --set output.dir="$d" > "$d.log" 2>&1 \
        || { cat "$d.log"; exit 1; }
    done
  done
done
# a full ring: 8 ranks, rank 3 stalls before its last step's first allreduce
MT_TEST_STALL=3:$STEPS:allreduce "${launcher[@]}" -n 8 build/bin/meshtrain "${common[@]}" \
  --set parallel.dp=8 --set train.collective_timeout_s=5 --set output.dir="$OUT/stall" \
  > "$OUT/stall.log" 2>&1 && { echo "the stalled run did not fail"; exit 1; }
# the recorder's own cost: a begin/end pair, timed in a loop (the watchdog
# thread running beside it)
cat > "$OUT/pair.c" <<'C'
#include <stdio.h>
#include "core/core.h"
#include "core/flight.h"
int main(void) {
  mt_flight_opts o = {.dir = "/nonexistent", .rank = 0, .world = 1, .timeout_s = 900};
  mt_flight_start(&o);
  const int n = 10 * 1000 * 1000;
  double t0 = mt_wall_now();
  for (int i = 0; i < n; i++) mt_flight_end(mt_flight_begin("allreduce", "dp", 0, 1, 8, -1, MT_FLIGHT_NEW, 4096));
  printf("%.1f\n", 1e9 * (mt_wall_now() - t0) / n);
  mt_flight_stop();
  return 0;
}
C
mpicc -O2 -Ilib "$OUT/pair.c" build/lib/libmt_core.a $(pkg-config --libs libcjson inih) -lm -lpthread \
  -o "$OUT/pair" && "$OUT/pair" > "$OUT/pair_ns.txt"
python3 - "$OUT" "$ROUNDS" "$(nproc --all)" <<'PY'
import glob, json, os, statistics, sys
out, rounds, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("small, dp = ranks x 1 thread, global batch 8, %d cores here" % cores)
print("%5s %12s %12s %14s %s" % ("ranks", "off step s", "on step s", "on / off", "per-round ratios"))
for np in (1, 4, 8):
    s = {t: [json.load(open("%s/np%d-r%d-t%d/summary.json" % (out, np, r, t)))["mean_step_s"]
             for r in range(1, rounds + 1)] for t in (900, 0)}
    ratios = [a / b for a, b in zip(s[900], s[0])]
    print("%5d %12.4f %12.4f %14.4f %s%s" % (np, statistics.median(s[0]), statistics.median(s[900]),
          statistics.median(ratios), " ".join("%.3f" % x for x in ratios),
          "  (oversubscribed)" if np > cores else ""))
recs = glob.glob(out + "/stall/flight/rank_*.json")
sizes = [os.path.getsize(p) for p in recs]
ops = [len(json.load(open(p))["ops"]) for p in recs]
print("flight records: %d ranks, %d-%d calls each, %.1f-%.1f KB each" %
      (len(recs), min(ops), max(ops), min(sizes) / 1e3, max(sizes) / 1e3))
# calls per step (the ring's entries over the steps they span) x the pair's cost
rec = json.load(open(recs[0]))
steps = {o["step"] for o in rec["ops"]}
per_step = len(rec["ops"]) / max(1, len(steps))
pair_ns = float(open(out + "/pair_ns.txt").read())
s1 = statistics.median(json.load(open("%s/np1-r%d-t0/summary.json" % (out, r)))["mean_step_s"]
                       for r in range(1, rounds + 1))
print("recorder: %.1f ns per call (begin + end), ~%.0f calls per step at 8 ranks: %.2g of a "
      "%.3f s step" % (pair_ns, per_step, per_step * pair_ns * 1e-9 / s1, s1))
PY
