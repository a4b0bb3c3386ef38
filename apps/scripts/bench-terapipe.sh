#!/usr/bin/env bash
# Token slices (parallel.pp_token_slices, TeraPipe, issue 43): the measured
# pipeline bubble against theory, (p-1)/(m k + p-1) for m micro-batches of
# k equal slices, and the step, for k = 1, 2, 4, 8 at pp 4 with 1 and 2
# micro-batches a step (gpipe where m k < pp, else 1f1b).
#   1. virtual: a Llama-3-8B-shaped model with 16 blocks on 4 virtual H100
#      ranks (h100-sxm), bf16, T = 2048, 4096, 8192; beside meshplan's step
#      and bubble for the same layouts (virtual seconds: the same on any
#      machine);
#   2. real: the small preset with 8 blocks at T = 2048 (pp 2 on 2 ranks, a
#      core each; pp 4 on 4 ranks sharing the cores: time-sharing inflates
#      its bubble), fp32, 1 thread a rank.
# The bubble is the mean over stages of 1 - compute / wall, the median over
# steps 2 on; the stages are not equal (the first holds the embedding, the
# last the LM head), so at m k = 1 it sits above the equal-stage theory.
#   apps/scripts/bench-terapipe.sh
#   PARTS=virtual or PARTS=real runs one of the two (default: both)
source "$(dirname "$0")/bench_common.sh" terapipe
BUILD=build
PARTS=${PARTS:-virtual real}
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
C=(--set data.train=inputs/data/corpus.txt --set train.eval_every=0 --set ckpt.mode=none
   --set train.micro_batch=1)
run() { # NAME NP ARGS...
  rm -rf "${OUT:?}/$1"
  "${launcher[@]}" -n "$2" "$BUILD/bin/meshtrain" "${C[@]}" "${@:3}" \
    --set output.dir="$OUT/$1" > "$OUT/$1.log" 2>&1 || { tail -5 "$OUT/$1.log"; exit 1; }
}
sched() { [ $(($1 * $2)) -lt "$3" ] && echo gpipe || echo 1f1b; } # M K PP
row() { # RUN PP M K [PLAN_ARGS...]: measured (and planned) figures
  local plan=""
  if [ $# -gt 4 ]; then
    plan=$("$BUILD/bin/meshplan" inputs/default.ini "${C[@]}" "${@:5}" --only --hw h100-sxm \
      2>/dev/null | tail -1)
  fi
  python3 - "$OUT/$1/metrics.jsonl" "$2" "$3" "$4" "$plan" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
p, m, k = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bub = statistics.median(sum(r["pp"]["bubble"]) / len(r["pp"]["bubble"]) for r in rows)
step = statistics.median(r["step_s"] for r in rows)
tps = statistics.median(r["tokens_per_s"] for r in rows)
line = "  m %d k %d: bubble %.3f (theory %.3f)  step %8.2f ms  tokens/s %9.0f" % (
    m, k, bub, (p - 1) / (m * k + p - 1), 1e3 * step, tps)
if sys.argv[5]:
    c = json.loads(sys.argv[5])
    line += "  | meshplan step %8.2f ms (%+.1f%%), bubble %.3f" % (
        1e3 * c["step_s"], 100 * (c["step_s"] / step - 1), c["pp_bubble_s"] / c["step_s"])
print(line)
PY
}
if [[ " $PARTS " == *" virtual "* ]]; then
  V=(--set model.preset=llama3-8b --set model.n_layer=16 --set parallel.pp=4
     --set train.precision=bf16 --set train.steps=4)
  for T in 2048 4096 8192; do
    echo "## virtual: llama3-8b shape, 16 blocks, pp 4, T $T, bf16, h100-sxm" |
      tee -a "$OUT/summary.txt"
    for m in 1 2; do
      for k in 1 2 4 8; do
        S=(--set model.seq_len="$T" --set train.global_batch="$m"
           --set parallel.schedule="$(sched "$m" "$k" 4)" --set parallel.pp_token_slices="$k")
        run "v_T${T}_m${m}_k$k" 4 "${V[@]}" "${S[@]}" --set train.device=virtual \
          --set train.virtual_hw=h100-sxm
        row "v_T${T}_m${m}_k$k" 4 "$m" "$k" "${V[@]}" "${S[@]}" --set parallel.dp=1
      done
    done
  done
fi
if [[ " $PARTS " == *" real "* ]]; then
  R=(--set model.preset=small --set model.n_layer=8 --set model.seq_len=2048 --set train.steps=5
     --set train.threads=1)
  for pp in 2 4; do
    echo "## real: small, 8 blocks, T 2048, pp $pp on $pp ranks, 1 thread each" |
      tee -a "$OUT/summary.txt"
    for m in 1 2; do
      for k in 1 2 4 8; do
        OMP_NUM_THREADS=1 run "r_pp${pp}_m${m}_k$k" "$pp" "${R[@]}" --set parallel.pp="$pp" \
          --set train.global_batch="$m" --set parallel.schedule="$(sched "$m" "$k" "$pp")" \
          --set parallel.pp_token_slices="$k"
        row "r_pp${pp}_m${m}_k$k" "$pp" "$m" "$k"
      done
    done
  done
fi
