#!/usr/bin/env bash
# The ladder residual (model.residual = ladder, issue 43) against the
# standard residual: exposed tensor-parallel time per step (time_s.tp_comm)
# and the step, the median of steps 3 on.
#   1. virtual: a Llama-3-8B-shaped model with 4 blocks at tp 8 on 8
#      virtual H100 ranks (h100-sxm), one sequence of 8192 tokens, fp32,
#      with and without sp; beside meshplan's tp and step for the same
#      layouts (virtual seconds: the same on any machine);
#   2. real: the small preset at tp 2 on 2 ranks, a core each (noisy on a
#      shared machine: the summary says the load average).
#   apps/scripts/bench-ladder.sh [BUILD_DIR]     (default: build)
#   PARTS=virtual or PARTS=real runs one of the two (default: both)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
PARTS=${PARTS:-virtual real}
OUT=outputs/bench-ladder
mkdir -p "$OUT" inputs/data
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f inputs/data/corpus.txt ] || "$BUILD/bin/meshdata" corpus inputs/data/corpus.txt
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
C=(--set data.train=inputs/data/corpus.txt --set train.eval_every=0 --set ckpt.mode=none)
run() { # NAME NP ARGS...
  rm -rf "${OUT:?}/$1"
  mpirun --oversubscribe -n "$2" "$BUILD/bin/meshtrain" "${C[@]}" "${@:3}" \
    --set output.dir="$OUT/$1" > "$OUT/$1.log" 2>&1 || { tail -5 "$OUT/$1.log"; exit 1; }
}
median() { # RUN LABEL: the median tp_comm and step over steps 3..
  python3 - "$OUT/$1/metrics.jsonl" "$2" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
tp = statistics.median(r["time_s"]["tp_comm"] for r in rows)
step = statistics.median(r["step_s"] for r in rows)
print("%-34s exposed tp %8.2f ms  step %8.2f ms  tokens/s %10.0f" % (
    sys.argv[2], 1e3 * tp, 1e3 * step, statistics.median(r["tokens_per_s"] for r in rows)))
PY
}
if [[ " $PARTS " == *" virtual "* ]]; then
  echo "## virtual: llama3-8b shape, 4 blocks, tp 8, T 8192, fp32, h100-sxm" | tee -a "$OUT/summary.txt"
  V=(--set model.preset=llama3-8b --set model.n_layer=4 --set model.seq_len=8192
     --set parallel.tp=8 --set train.device=virtual --set train.virtual_hw=h100-sxm
     --set train.global_batch=1 --set train.micro_batch=1 --set train.steps=5)
  for sp in false true; do
    for r in standard ladder; do
      run "v_${r}_sp$sp" 8 "${V[@]}" --set parallel.sp=$sp --set model.residual=$r
      median "v_${r}_sp$sp" "virtual $r sp=$sp"
      "$BUILD/bin/meshplan" inputs/default.ini "${V[@]}" "${C[@]}" --set parallel.sp=$sp \
        --set model.residual=$r --set parallel.dp=1 --only --hw h100-sxm 2>/dev/null | tail -1 |
        python3 -c 'import json, sys; c = json.loads(sys.stdin.read())
print("  meshplan: tp %.2f ms, step %.2f ms" % (1e3 * c["tp_s"], 1e3 * c["step_s"]))' |
        tee -a "$OUT/summary.txt"
    done
  done
fi
if [[ " $PARTS " == *" real "* ]]; then
  echo "## real: small, tp 2 on 2 ranks, 1 thread each, 10 steps" | tee -a "$OUT/summary.txt"
  for r in standard ladder; do
    OMP_NUM_THREADS=1 run "r_$r" 2 --set model.preset=small --set parallel.tp=2 \
      --set train.steps=10 --set train.threads=1 --set model.residual=$r
    median "r_$r" "real tp2 $r"
  done
fi
