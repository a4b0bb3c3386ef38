#!/usr/bin/env bash
# Benchmark (not a test): `small` on 2 ranks x 1 thread, tensor parallelism
# against data parallelism, measured in the same run.
#   bash tests/tp/bench.sh [BUILD_DIR] [STEPS] [ROUNDS]
# Prints per layout: tokens/s at the median step time (steps 2..STEPS of every
# round), the ratio to dp=2, the best step, and the median share of step time
# spent in tp collectives (and in dp), with the bytes each rank sends per step.
# Rounds interleave the layouts so machine noise hits all of them alike.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}; STEPS=${2:-12}; ROUNDS=${3:-2}
source apps/scripts/env.sh "$BUILD"
OUT=outputs/bench-tp
rm -rf "$OUT"; mkdir -p "$OUT" inputs/data
[ -f inputs/data/corpus.txt ] || "$BUILD"/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
common=(inputs/default.ini --set model.preset=small --set model.seq_len=256 --set train.steps="$STEPS"
        --set train.global_batch=16 --set train.micro_batch=8 --set train.eval_every=0
        --set train.log_every=1000 --set train.threads=1 --set metrics.peak_gflops=100)
for round in $(seq "$ROUNDS"); do
  for layout in "dp2:--set parallel.dp=2 --set parallel.zero=0" \
                "tp2:--set parallel.dp=1 --set parallel.tp=2" \
                "tp2_sp:--set parallel.dp=1 --set parallel.tp=2 --set parallel.sp=true"; do
    name=${layout%%:*}; args=${layout#*:}
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${launcher[@]}" -n 2 "$BUILD"/bin/meshtrain "${common[@]}" \
      $args --set output.dir="$OUT/$name-$round" > "$OUT/$name-$round.log" 2>&1 \
      || { cat "$OUT/$name-$round.log"; exit 1; }
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for name in ("dp2", "tp2", "tp2_sp"):
    recs = []
    for r in range(1, rounds + 1):
        recs += [json.loads(l) for l in open("%s/%s-%d/metrics.jsonl" % (out, name, r))][1:]
    # medians over steps: other work on the machine stalls a rank now and then,
    # and a stalled rank shows as communication time on the ranks it syncs with
    step = statistics.median(r["step_s"] for r in recs)
    best = min(r["step_s"] for r in recs)
    tp = statistics.median(r["time_s"]["tp_comm"] / r["step_s"] for r in recs)
    dp = statistics.median(r["time_s"]["dp_comm"] / r["step_s"] for r in recs)
    res[name] = (recs[0]["tokens"], step, best, tp, dp, recs[0]["tp_bytes"], recs[0]["dp_bytes"])
base = res["dp2"][0] / res["dp2"][1]
print("small (T=256), 2 ranks x 1 thread, global batch 16, micro-batch 8; %d rounds, steps 2.. each"
      % rounds)
print("%-7s %10s %7s %9s %9s %9s %9s %11s %11s" % ("layout", "tokens/s", "vs dp2", "step ms",
      "best ms", "tp share", "dp share", "tp MB/step", "dp MB/step"))
for name, (tokens, step, best, tp, dp, tpb, dpb) in res.items():
    print("%-7s %10.0f %7.3f %9.1f %9.1f %8.1f%% %8.1f%% %11.2f %11.2f" % (
          name, tokens / step, tokens / step / base, 1e3 * step, 1e3 * best, 100 * tp, 100 * dp,
          tpb / 1e6, dpb / 1e6))
PY
