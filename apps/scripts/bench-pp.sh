#!/usr/bin/env bash
# Pipeline bubble and activation memory: measured against theory.
#   apps/scripts/bench-pp.sh [STEPS]
# For pp = 2, 4 and m = 4, 8, 16 micro-batches and each schedule, trains a
# custom 8-layer model (C=128, T=128, micro-batch 1, 1 thread per rank) and
# prints the mean measured bubble over stages and steps 2.., the theory
# ((p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) interleaved with v=2,
# (p-1)/(3m+p-1) zb-h1) and the peak activation bytes per stage.
# Ranks beyond the machine's cores time-share, which inflates the bubble.
source "$(dirname "$0")/bench_common.sh" pp
STEPS=${1:-5}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for pp in 2 4; do
  for m in 4 8 16; do
    for sched in gpipe 1f1b interleaved zb-h1; do
      v=1; [ "$sched" = interleaved ] && v=2
      dir="$OUT/pp${pp}_m${m}_${sched}"
      "${launcher[@]}" -n "$pp" build/bin/meshtrain inputs/default.ini --set model.preset=custom \
        --set model.n_layer=8 --set model.n_embd=128 --set model.n_head=4 --set model.seq_len=128 \
        --set parallel.dp=1 --set parallel.pp="$pp" --set parallel.schedule="$sched" \
        --set parallel.virtual_stages="$v" --set train.micro_batch=1 --set train.global_batch="$m" \
        --set train.micro_batches="$m" --set parallel.zero=0 --set train.steps="$STEPS" \
        --set train.eval_every=0 --set ckpt.mode=none --set output.dir="$dir" > "$dir.log" 2>&1 \
        || { echo "failed: $dir (see $dir.log)"; continue; }
    done
  done
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
print("%-3s %-3s %-12s %9s %9s  %s" % ("pp", "m", "schedule", "measured", "theory", "act peak per stage (MiB)"))
for d in sorted(glob.glob(sys.argv[1] + "/pp*_m*_*/")):
    name = os.path.basename(d.rstrip("/"))
    pp, m, sched = name.split("_", 2)
    p, mm = int(pp[2:]), int(m[1:])
    recs = [json.loads(l) for l in open(d + "metrics.jsonl")][1:]
    if not recs or "pp" not in recs[0]:
        continue
    bub = sum(sum(r["pp"]["bubble"]) / len(r["pp"]["bubble"]) for r in recs) / len(recs)
    act = [max(r["pp"]["act_peak_bytes"][s] for r in recs) / 2**20 for s in range(p)]
    v = 2 if sched == "interleaved" else 1
    k = 3 if sched == "zb-h1" else v
    theory = (p - 1) / (k * mm + p - 1)
    print("%-3d %-3d %-12s %9.3f %9.3f  %s" % (p, mm, sched, bub, theory, " ".join("%.1f" % a for a in act)))
PY
