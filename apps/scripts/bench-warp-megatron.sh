#!/usr/bin/env bash
# The virtual device against Megatron-LM's published throughput (Narayanan
# et al. 2021, Table 1: GPT models on DGX A100 80GB, tensor + data
# parallelism, activation recomputation): each row of
# inputs/published_runs.csv named here run on as many emulated A100s
# (profile a100-80gb-dgx) for 2 steps at the published layout, global batch
# 512, micro-batch MB (not published; 1 by default), and its per-GPU
# TFLOP/s counted as the paper counts them (96 B s l h^2 (1 + s/6h +
# V/16lh) an iteration, recomputation included) next to the published
# figure. Not a test (a figure for the note).
#   apps/scripts/bench-warp-megatron.sh [ROWS="mlm-1.7b mlm-3.6b mlm-7.5b"] [MB=1]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-mlm-1.7b mlm-3.6b mlm-7.5b} MB=${2:-1}
BIN=${MT_BIN:-build/bin}
OUT=${MT_OUT:-outputs/bench-warp-megatron}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
corpus=$OUT/corpus.txt
[ -f "$corpus" ] || "$BIN/meshdata" corpus "$corpus" --bytes 2000000 > /dev/null
printf "%-10s %5s %-12s %9s %12s %12s %7s\n" row gpus layout step_s "TFLOP/s/GPU" published ratio
for row in $ROWS; do
  line=$(awk -F, -v r="$row" '$1 == r {print; exit}' inputs/published_runs.csv)
  [ -n "$line" ] || { echo "$row: not in inputs/published_runs.csv" >&2; exit 2; }
  IFS=, read -r _ _ _ _ _ prof gpus L C H T V _ _ _ GB _ TP PP _ _ _ _ _ _ _ _ _ _ _ _ value _ <<< "$line"
  DP=$((gpus / (TP * PP)))
  rm -rf "$OUT/$row"
  nice -n 19 mpirun --oversubscribe --bind-to none -n "$gpus" "$BIN/meshtrain" --set model.preset=custom \
    --set model.n_layer="$L" --set model.n_embd="$C" --set model.n_head="$H" --set model.seq_len="$T" \
    --set model.vocab_size="$V" --set train.global_batch="$GB" --set train.micro_batch="$MB" \
    --set parallel.tp="$TP" --set parallel.pp="$PP" --set parallel.dp="$DP" --set train.recompute=true \
    --set data.train="$corpus" --set train.steps=2 --set train.eval_every=0 --set ckpt.mode=none \
    --set train.device=virtual --set train.virtual_hw="$prof" --set output.dir="$OUT/$row" \
    > "$OUT/$row.log" 2>&1 || { tail -5 "$OUT/$row.log"; exit 1; }
  python3 - "$OUT/$row" "$row" "$gpus" "$TP" "$PP" "$DP" "$L" "$C" "$T" "$V" "$GB" "$value" <<'PY'
import json, sys
run, row = sys.argv[1], sys.argv[2]
gpus, tp, pp, dp, l, h, s, V, B = (int(x) for x in sys.argv[3:12])
pub = float(sys.argv[12])
step = [json.loads(x) for x in open(run + "/metrics.jsonl")][-1]["step_s"]
flops = 96.0 * B * s * l * h * h * (1 + s / (6.0 * h) + V / (16.0 * l * h))
t = flops / step / gpus / 1e12
print("%-10s %5d %-12s %9.3f %12.1f %12.1f %7.3f" % (row, gpus, "tp%d pp%d dp%d" % (tp, pp, dp), step, t, pub, t / pub))
PY
done
