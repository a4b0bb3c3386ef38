#!/usr/bin/env bash
# Muon distributed as Canzona (optim.name = muon, issue 42) against AdamW
# and against the naive Muon (optim.muon_distribution = replicated: every
# rank gathers every matrix and orthogonalises all of them):
#   1. virtual: Llama-3-8B at T = 4096 on 64 virtual H100 ranks, dp 8 x tp 8
#      + sp, ZeRO-1, bf16 (global batch 64), and gpt2-124m at dp 16 x tp 4:
#      the step, the optimizer's time and its share of the step;
#   2. real: the small preset on 2 ranks (dp 2, a core each) and 4 ranks (dp
#      4; on fewer than 4 cores they share them, said in the summary): the
#      same figures, the mean of steps 2-5;
#   3. loss: the small preset on the default corpus, 100 steps on 2 ranks,
#      AdamW and Muon at the same train.lr (Muon's rms scale matches
#      AdamW's update size): the loss at the last step.
#   apps/scripts/bench-muon.sh [BUILD_DIR]     (default: build)
#   PARTS=virtual, real or loss runs those (default: all three)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
PARTS=${PARTS:-virtual real loss}
OUT=outputs/bench-muon
mkdir -p "$OUT" inputs/data
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f inputs/data/corpus.txt ] || "$BUILD/bin/meshdata" corpus inputs/data/corpus.txt
cores=$(nproc)
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores" | tee "$OUT/summary.txt"
C=(--set data.train=inputs/data/corpus.txt --set train.eval_every=0 --set ckpt.mode=none)
optims=("adamw --set optim.name=adamw"
        "muon_replicated --set optim.name=muon --set optim.muon_distribution=replicated"
        "muon_balanced --set optim.name=muon")
# report RUN LABEL FIRST BASE: mean step, optimizer time (compute) and its
# share over steps FIRST.., and the step's increase over run BASE (AdamW's:
# Muon's whole cost, its exchange's communication included)
report() {
  python3 - "$OUT/$1/metrics.jsonl" "$2" "$3" "$OUT/$4/metrics.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
def mean(path, key):
    rows = [json.loads(l) for l in open(path)][int(sys.argv[3]) - 1:]
    return sum(key(r) for r in rows) / len(rows)
step = mean(sys.argv[1], lambda r: r["step_s"])
opt = mean(sys.argv[1], lambda r: r["time_s"]["optimizer"])
base = mean(sys.argv[4], lambda r: r["step_s"])
print("%-42s step %9.4f s  optimizer %9.4f s (%5.1f%%)  step / adamw's %.3f" % (
    sys.argv[2], step, opt, 100 * opt / step, step / base))
PY
}
run() { # NAME NP ARGS...
  rm -rf "${OUT:?}/$1"
  mpirun --oversubscribe -n "$2" "$BUILD/bin/meshtrain" "${C[@]}" "${@:3}" \
    --set output.dir="$OUT/$1" > "$OUT/$1.log" 2>&1 || { tail -5 "$OUT/$1.log"; exit 1; }
}
if [[ " $PARTS " == *" virtual "* ]]; then
  echo "## virtual, 64 H100 ranks (h100-sxm profile), bf16, ZeRO-1: virtual seconds" |
    tee -a "$OUT/summary.txt"
  V=(--set train.device=virtual --set train.virtual_hw=h100-sxm --set train.precision=bf16
     --set parallel.zero=1 --set train.micro_batch=1 --set train.steps=3)
  for o in "${optims[@]}"; do
    read -r name args <<< "$o"
    # shellcheck disable=SC2086
    run "v8b_$name" 64 "${V[@]}" --set model.preset=llama3-8b --set model.seq_len=4096 \
      --set parallel.dp=8 --set parallel.tp=8 --set parallel.sp=true --set train.global_batch=64 $args
    report "v8b_$name" "llama3-8b dp8 x tp8 T4096 $name" 2 v8b_adamw
  done
  for o in "${optims[@]}"; do
    read -r name args <<< "$o"
    # shellcheck disable=SC2086
    run "v124_$name" 64 "${V[@]}" --set model.preset=gpt2-124m --set parallel.dp=16 \
      --set parallel.tp=4 --set train.global_batch=64 $args
    report "v124_$name" "gpt2-124m dp16 x tp4 T1024 $name" 2 v124_adamw
  done
fi
if [[ " $PARTS " == *" real "* ]]; then
  echo "## real ranks, small preset (6 x 384, T 256), global batch 32, 1 thread each" |
    tee -a "$OUT/summary.txt"
  for np in 2 4; do
    [ "$np" -gt "$cores" ] && echo "# $np ranks on $cores cores: they share them" |
      tee -a "$OUT/summary.txt"
    for o in "${optims[@]}"; do
      read -r name args <<< "$o"
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 run "r${np}_$name" "$np" --set model.preset=small --set parallel.dp="$np" \
        --set train.steps=5 --set train.threads=1 $args
      report "r${np}_$name" "small dp$np $name" 2 "r${np}_adamw"
    done
  done
fi
if [[ " $PARTS " == *" loss "* ]]; then
  echo "## loss, small preset, 100 steps, dp 2, train.lr 1e-3 (the default)" |
    tee -a "$OUT/summary.txt"
  for o in adamw muon; do
    run "loss_$o" 2 --set model.preset=small --set parallel.dp=2 --set train.steps=100 \
      --set optim.name="$o"
    python3 - "$OUT/loss_$o/metrics.jsonl" "$o" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = sum(r["loss"] for r in rows[-10:]) / 10
print("%-6s loss at step %d: %.4f (mean of the last 10 steps %.4f)" % (sys.argv[2],
      rows[-1]["step"], rows[-1]["loss"], last))
PY
  done
fi
