#!/usr/bin/env bash
# Training throughput of this tree against an earlier revision, measured in
# the same run: both built alike (Release, the CPU this machine has), then
# each configuration run by the two builds in turn, the order swapped every
# round so a change of load hits both alike. Reports per configuration the
# median tokens/s of each build and the median of the rounds' ratios
# (this tree / BASE); a ratio near 1 says a change cost nothing.
#   apps/scripts/bench-compare.sh BASE_REV [ROUNDS] [STEPS]
# Configurations: the default job (inputs/default.ini: small, T = 128,
# dp = 4, ZeRO 1, one thread a rank) and gpt2-124m at T = 1024 on one rank
# with every core, fp32 and bf16. The first step (warm-up) is not timed:
# summary.json's tokens_per_s is over the steps after it.
BASE=${1:?usage: bench-compare.sh BASE_REV [ROUNDS] [STEPS]}
ROUNDS=${2:-3}; STEPS=${3:-4}
source "$(dirname "$0")/bench_common.sh" compare --bind-to none
base_src=$OUT/base-src
git worktree add -f --detach "$base_src" "$BASE" > /dev/null
trap 'git worktree remove --force "$base_src"' EXIT
cmake -S "$base_src" -B "$OUT/base-build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$OUT/base-build" -j "$(nproc)" --target meshtrain > /dev/null
declare -A bin=([base]="$OUT/base-build/bin/meshtrain" [head]=build/bin/meshtrain)
cores=$(nproc)
common=(inputs/default.ini --set train.steps="$STEPS" --set train.eval_every=0
        --set train.log_every=1000 --set ckpt.mode=none)
# name | ranks | threads a rank | keys
configs=("default|4|1|"
         "124m-fp32|1|$cores|--set model.preset=gpt2-124m --set model.seq_len=1024 --set parallel.dp=1 --set train.global_batch=2 --set train.micro_batch=1"
         "124m-bf16|1|$cores|--set model.preset=gpt2-124m --set model.seq_len=1024 --set parallel.dp=1 --set train.global_batch=2 --set train.micro_batch=1 --set train.precision=bf16")
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "CPU: $cpu, $cores cores; BASE = $(git rev-parse --short "$BASE"), this tree = $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)')" | tee "$OUT/cpu.txt"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
for r in $(seq 1 "$ROUNDS"); do
  order=(base head)
  [ $((r % 2)) = 0 ] && order=(head base)
  for c in "${configs[@]}"; do
    IFS='|' read -r name ranks th keys <<< "$c"
    for b in "${order[@]}"; do
      run="$OUT/r$r-$name-$b"
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th "${launcher[@]}" -n "$ranks" "${bin[$b]}" \
        "${common[@]}" $keys --set train.threads="$th" --set output.dir="$run" > "$run.log" 2>&1 \
        || { cat "$run.log"; exit 1; }
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"
python3 - "$OUT" "$ROUNDS" "${configs[@]}" <<'PY'
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), [c.split("|")[0] for c in sys.argv[3:]]
med = statistics.median
def tps(r, name, b):
    return json.load(open("%s/r%d-%s-%s/summary.json" % (out, r, name, b)))["tokens_per_s"]
rows = []
for name in names:
    base = [tps(r, name, "base") for r in range(1, rounds + 1)]
    head = [tps(r, name, "head") for r in range(1, rounds + 1)]
    ratio = [h / b for h, b in zip(head, base)]
    rows.append({"config": name, "base_tokens_per_s": med(base), "head_tokens_per_s": med(head),
                 "ratio": med(ratio), "ratios": ratio})
    print("%-10s base %9.1f tok/s | this tree %9.1f tok/s | this / base %.3f (rounds: %s)"
          % (name, med(base), med(head), med(ratio), " ".join("%.3f" % x for x in ratio)))
json.dump(rows, open(out + "/compare.json", "w"), indent=1)
PY
