#!/usr/bin/env bash
# Pipelines without exceptions: bubble, exposed dp time and memory per
# schedule, measured here; and meshplan's prediction for a 7B on 16
# LEONARDO nodes per schedule.
#   apps/scripts/bench-pipe.sh [STEPS]
# 1. bubble per schedule against its theory, at pp 2 x dp 1 (2 ranks) and
#    pp 2 x dp 2 (4 ranks, ZeRO-1), m = 8 micro-batches: the mean measured
#    bubble over stages and steps 2.. (1 - compute / wall of the schedule),
#    theory (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for
#    interleaved and breadth-first (v = 2), (p-1)/(3m+p-1) for zb-h1, and
#    for zb-v (v = 2, its V) the validator's unit-time simulation (F = 1,
#    B = 2 per stage: meshtrain --print-schedule);
# 2. exposed dp time under pp (pp 2 x dp 2, 1f1b): per stage, the seconds
#    blocked in the dp group's calls during forward, backward and the sync
#    (metrics pp.dp_exposed_s), with parallel.overlap_dp = false and true at
#    ZeRO-1, and at ZeRO-2 and -3 (always overlapped), as a ratio to the
#    ZeRO-1 run without overlap of the same script run; and the part of the
#    gradient bytes launched during the schedule (pp.dp_overlapped);
# 3. memory per rank per schedule (the allocator's peak, summary.json) at
#    pp 2 x dp 2 and ZeRO 1 and 3;
# 4. meshplan --only for a 7B (32 layers, C 4096, T 4096) on 16 LEONARDO
#    nodes (64 GPUs: tp 4 x pp 4 x dp 4, sp, micro-batch 1) at a small
#    global batch (32 sequences, m = 8) under 1f1b, interleaved,
#    breadth-first, zb-h1 and zb-v at ZeRO 1 (dp overlap on and off) and
#    ZeRO 3.
# Ranks beyond the machine's cores time-share, which inflates the bubble
# (the script prints the load average before and after).
source "$(dirname "$0")/bench_common.sh" pipe
STEPS=${1:-6}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc --all) cores"
# a vocabulary of 256 so that the head weighs about a block (the schedules'
# theory takes equal stages): C 256, T 256, 8 blocks
model=(--set model.preset=custom --set model.n_layer=8 --set model.n_embd=256 --set model.n_head=4
       --set model.seq_len=256 --set model.vocab_size=256 --set train.micro_batch=1
       --set train.steps="$STEPS" --set train.eval_every=0 --set ckpt.mode=none)
run() { # NAME NP ARGS...
  local name=$1 np=$2; shift 2
  "${launcher[@]}" -n "$np" build/bin/meshtrain inputs/default.ini "${model[@]}" \
    --set output.dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 \
    || echo "failed: $name (see $OUT/$name.log)"
}
scheds=("gpipe 1" "1f1b 1" "interleaved 2" "zb-h1 1" "breadth-first 2" "zb-v 2")
for g in 8 16; do # zb-v's theory: its simulated bubble at m = 8 (pp2 x dp1 and pp2 x dp2)
  build/bin/meshtrain inputs/default.ini "${model[@]}" --set parallel.pp=2 --set parallel.dp=$((g / 8)) \
    --set parallel.schedule=zb-v --set parallel.virtual_stages=2 --set train.global_batch=$g \
    --print-schedule | sed -n 's/^# simulated bubble.* //p' > "$OUT/zbv_theory_$g.txt"
done
for sc in "${scheds[@]}"; do
  read -r s v <<< "$sc"
  run "b_dp1_$s" 2 --set parallel.pp=2 --set parallel.dp=1 --set parallel.schedule="$s" \
    --set parallel.virtual_stages="$v" --set train.global_batch=8
  for z in 1 3; do
    run "b_dp2_z${z}_$s" 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero="$z" \
      --set parallel.schedule="$s" --set parallel.virtual_stages="$v" --set train.global_batch=16
  done
done
for c in "z1_noov 1 false" "z1_ov 1 true" "z2 2 true" "z3 3 true"; do
  read -r name z ov <<< "$c"
  run "dp_$name" 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero="$z" \
    --set parallel.overlap_dp="$ov" --set train.global_batch=16
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def recs(name):
    p = os.path.join(out, name, "metrics.jsonl")
    return [json.loads(l) for l in open(p)][1:] if os.path.exists(p) else []
def summary(name):
    p = os.path.join(out, name, "summary.json")
    return json.load(open(p)) if os.path.exists(p) else None
print("\n1. bubble (mean over stages and steps 2..) vs theory, m = 8")
print("%-14s %-12s %9s %9s %7s" % ("schedule", "layout", "measured", "theory", "ratio"))
for s, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("breadth-first", 2),
             ("zb-v", 2)):
    k = 3 if s == "zb-h1" else v
    for name, lay, g in (("b_dp1_" + s, "pp2 x dp1", 8), ("b_dp2_z1_" + s, "pp2 x dp2", 16)):
        th = 1.0 / (k * 8 + 1)
        if s == "zb-v":
            th = float(open(os.path.join(out, "zbv_theory_%d.txt" % g)).read().split()[0])
        rs = recs(name)
        if not rs:
            print("%-14s %-12s   (no run)" % (s, lay)); continue
        b = sum(sum(r["pp"]["bubble"]) / len(r["pp"]["bubble"]) for r in rs) / len(rs)
        print("%-14s %-12s %9.3f %9.3f %7.2f" % (s, lay, b, th, b / th))
print("\n2. exposed dp seconds per step per stage (pp2 x dp2, 1f1b), ratio to ZeRO-1 without overlap")
base = None
for name, what in (("dp_z1_noov", "ZeRO-1, overlap off"), ("dp_z1_ov", "ZeRO-1, overlap on"),
                   ("dp_z2", "ZeRO-2"), ("dp_z3", "ZeRO-3")):
    rs = recs(name)
    if not rs:
        print("%-22s (no run)" % what); continue
    ex = [sum(r["pp"]["dp_exposed_s"][st] for r in rs) / len(rs) for st in range(2)]
    ovl = [sum(r["pp"]["dp_overlapped"][st] for r in rs) / len(rs) for st in range(2)]
    if base is None: base = ex
    print("%-22s stage 0 %.4f s (x%.2f), stage 1 %.4f s (x%.2f); launched during the schedule %.0f%% / %.0f%%"
          % (what, ex[0], ex[0] / base[0] if base[0] else 0, ex[1], ex[1] / base[1] if base[1] else 0,
             100 * ovl[0], 100 * ovl[1]))
print("\n3. peak memory per rank (MiB, allocator), pp2 x dp2: ranks 0..3")
for s, _ in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("breadth-first", 2),
             ("zb-v", 2)):
    for z in (1, 3):
        sm = summary("b_dp2_z%d_%s" % (z, s))
        if not sm: continue
        tot = [sum(r["mem_peak_bytes"].values()) / 2**20 for r in sorted(sm["ranks"], key=lambda r: r["rank"])]
        print("%-14s ZeRO-%d %s" % (s, z, " ".join("%7.1f" % t for t in tot)))
PY
echo
echo "4. meshplan --only: 7B on 16 LEONARDO nodes (tp 4 x pp 4 x dp 4, sp, global batch 32, m = 8)"
s7=(--set model.preset=custom --set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32
    --set model.seq_len=4096 --set model.vocab_size=32000 --set parallel.tp=4 --set parallel.pp=4
    --set parallel.dp=4 --set parallel.sp=true --set train.global_batch=32 --set train.micro_batch=1)
for sc in "${scheds[@]}"; do
  read -r s v <<< "$sc"
  for c in "1 true" "1 false" "3 true"; do
    read -r z ov <<< "$c"
    f="$OUT/plan_${s}_z${z}_$ov"
    if ! build/bin/meshplan inputs/default.ini "${s7[@]}" --set parallel.zero="$z" \
         --set parallel.overlap_dp="$ov" --set parallel.schedule="$s" \
         --set parallel.virtual_stages="$v" --hw leonardo-booster --only > "$f.json" 2> "$f.err"; then
      echo "$s ZeRO-$z: $(head -1 "$f.err")"
      continue
    fi
    python3 - "$f.json" "$s" "$z" "$ov" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("%-14s ZeRO-%s overlap %-5s step %.3f s, %6.0f tok/s, MFU %.3f, bubble %.3f s, dp exposed "
      "%.3f s (per stage %s), %.1f GiB" % (sys.argv[2], sys.argv[3], sys.argv[4], d["step_s"],
      d["tokens_per_s"], d["mfu"], d["pp_bubble_s"], d["dp_exposed_s"],
      " ".join("%.3f" % x for x in d["dp_stage_exposed_s"]), d["mem_bytes"] / 2**30))
PY
  done
done
