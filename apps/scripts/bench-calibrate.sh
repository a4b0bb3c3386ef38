#!/usr/bin/env bash
# How well the cost model prices this machine's layouts (a benchmark: it
# times things, so it is not a test). A profile is calibrated here by
# meshbench (gemm at the shapes of 128-512 tokens on one thread with cold
# caches, as a training step finds its operands, allreduce on
# 2 ranks, stream on one thread, the block attention kernels at T = 128 on
# one thread); then 8 layouts of `small` on 2 ranks x 1
# thread (dp with ZeRO-1 and -3, tp with sp, recompute, pp 1F1B at 8 and 2
# micro-batches, GPipe, pp with recompute) run ROUNDS times, interleaved, and
# each layout's fastest round (the machine's own speed, less what other jobs
# took) is set against two predictions from that one profile: meshplan's
# analytic step and the virtual device's (the same layout's real code on
# train.device = virtual, 5 virtual steps). Prints per layout the measured
# and both predicted steps and their ratios, then for each predictor the
# Spearman rank correlation with the measured order, the median and worst
# relative error, and the load average before and after (a busy machine
# moves the figures).
#   apps/scripts/bench-calibrate.sh [BUILD_DIR] [ROUNDS]
# PRECISION=bf16 calibrates the matmuls with `meshbench gemm-bf16 --cold`
# (bf16 on the path the run chooses, beside fp32: the profile's gemm_bf16)
# and the attention kernels in both precisions (attn_gflops_bf16), and
# trains every layout with train.precision = bf16.
# The behaviour of calibration (the profile holds what was measured, loads
# back, and drives the prediction) is the test plan.calibrated.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}; ROUNDS=${2:-2}
[ -x "$BUILD/bin/meshtrain" ] || bash apps/scripts/setup.sh "$BUILD"
source apps/scripts/env.sh "$BUILD"
OUT=outputs/bench-calibrate
rm -rf "$OUT"; mkdir -p "$OUT" inputs/data
[ -f inputs/data/corpus.txt ] || "$BUILD"/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

export PRECISION=${PRECISION:-fp32}
for tok in 128 256 512; do
  if [ "$PRECISION" = bf16 ]; then
    "$BUILD"/bin/meshbench gemm-bf16 --model small --threads 1 --tokens $tok --reps 3 --cold \
      --json "$OUT/gemm.jsonl" > /dev/null
  else
    "$BUILD"/bin/meshbench gemm --model small --threads 1 --tokens $tok --reps 3 --cold \
      --json "$OUT/gemm.jsonl" > /dev/null
  fi
done
"${launcher[@]}" -n 2 "$BUILD"/bin/meshbench allreduce --min-bytes 1K --max-bytes 16M \
  --json "$OUT/coll.jsonl" > /dev/null
"$BUILD"/bin/meshbench stream --mib 32 --threads 1 --json "$OUT/stream.jsonl" > /dev/null
for prec in fp32 $([ "$PRECISION" = bf16 ] && echo bf16); do
  "$BUILD"/bin/meshbench attention --model small --seq 128 --tokens 512 --threads 1 --reps 5 \
    --kernels new --precision $prec --json "$OUT/attn.jsonl" > /dev/null
done
"$BUILD"/bin/meshplan calibrate --gemm "$OUT/gemm.jsonl" --coll "$OUT/coll.jsonl" \
  --stream "$OUT/stream.jsonl" --attn "$OUT/attn.jsonl" --name here --devices-per-node 2 --mem-gib 8 --out "$OUT/here.ini"

common=(--set model.preset=small --set model.seq_len=128 --set train.global_batch=8
        --set train.steps=5 --set train.eval_every=0 --set ckpt.mode=none
        --set data.train=inputs/data/corpus.txt --set train.log_every=100
        --set train.precision="$PRECISION")
layouts=("dp_z1 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=4"
         "dp_z3 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=4"
         "tp_sp --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4"
         "dp_recompute --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=4 --set train.recompute=true"
         "pp_m8 --set parallel.pp=2 --set train.micro_batch=1"
         "pp_m2 --set parallel.pp=2 --set train.micro_batch=4"
         "pp_gpipe --set parallel.pp=2 --set train.micro_batch=2 --set parallel.schedule=gpipe"
         "pp_m2_recompute --set parallel.pp=2 --set train.micro_batch=4 --set train.recompute=true")
for round in $(seq 1 "$ROUNDS"); do
  for l in "${layouts[@]}"; do
    read -r name args <<< "$l"
    # shellcheck disable=SC2086
    "${launcher[@]}" -n 2 "$BUILD"/bin/meshtrain "${common[@]}" $args \
      --set output.dir="$OUT/$name-$round" > "$OUT/$name-$round.log" 2>&1 < /dev/null \
      || { cat "$OUT/$name-$round.log"; exit 1; }
    # shellcheck disable=SC2086
    [ "$round" = 1 ] && "$BUILD"/bin/meshplan "${common[@]}" $args --hw "$OUT/here.ini" --only \
      > "$OUT/$name.pred.json" < /dev/null
    # the same layout on the virtual device priced by the same profile: the real
    # code's issue order and waits, each op a jump of virtual time
    # shellcheck disable=SC2086
    [ "$round" = 1 ] && { "${launcher[@]}" -n 2 "$BUILD"/bin/meshtrain "${common[@]}" $args \
      --set train.device=virtual --set train.virtual_hw="$OUT/here.ini" \
      --set output.dir="$OUT/$name-virtual" > "$OUT/$name-virtual.log" 2>&1 < /dev/null \
      || { cat "$OUT/$name-virtual.log"; exit 1; }; }
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$OUT" "$ROUNDS" "$load_before" "$load_after" "${layouts[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
names = [l.split()[0] for l in sys.argv[5:]]
rows = []
for n in names:
    meas = min(json.load(open("%s/%s-%d/summary.json" % (out, n, r)))["mean_step_s"]
               for r in range(1, rounds + 1))
    pred = json.load(open("%s/%s.pred.json" % (out, n)))
    virt = json.load(open("%s/%s-virtual/summary.json" % (out, n)))["mean_step_s"]
    rows.append((n, meas, pred["step_s"], pred, virt))
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0] * len(v)
    for k, i in enumerate(order):
        r[i] = k
    return r
def spearman(x, y):
    a, b = ranks(x), ranks(y)
    n = len(x)
    return 1 - 6 * sum((p - q) ** 2 for p, q in zip(a, b)) / (n * (n * n - 1))
meas = [r[1] for r in rows]
print("small (T=128), 2 ranks x 1 thread, global batch 8, 5 steps, %s; fastest of %d rounds"
      % (os.environ.get("PRECISION", "fp32"), rounds))
print("%-16s %9s %9s %9s %6s %6s | %s" % ("layout", "measured", "meshplan", "virtual", "mp/m",
                                          "virt/m", "meshplan's parts (s)"))
for name, m, p, d, v in rows:
    print("%-16s %9.3f %9.3f %9.3f %6.2f %6.2f | compute %.3f tp %.3f bubble %.3f p2p %.3f "
          "dp %.3f optim %.3f" % (name, m, p, v, p / m, v / m, d["compute_s"], d["tp_s"],
                                  d["pp_bubble_s"], d["pp_p2p_s"], d["dp_exposed_s"], d["optim_s"]))
for label, col in (("meshplan", 2), ("virtual device", 4)):
    pred = [r[col] for r in rows]
    errs = [abs(p / m - 1) for p, m in zip(pred, meas)]
    print("%-15s Spearman %.3f, median relative error %.3f, worst %.3f" % (
        label + ":", spearman(meas, pred), statistics.median(errs), max(errs)))
print("load average before %s, after %s, on %d CPUs" % (before, after, os.cpu_count()))
PY
