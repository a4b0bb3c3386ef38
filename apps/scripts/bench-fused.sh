#!/usr/bin/env bash
# Two builds of meshtrain side by side (e.g. before and after a change to
# the kernels), one rank x 2 threads pinned to their own cores, fp32 and
# bf16, in one run on a machine others may share: for each model and
# precision the two builds alternate, REPS rounds, so that a slow minute
# hits both; each run's tokens/s is the median of its steps 2..; the figure
# is the median over the rounds and the ratio AFTER / BEFORE.
#   apps/scripts/bench-fused.sh BEFORE_BUILD AFTER_BUILD [REPS] [STEPS_SMALL] [STEPS_GPT2]
# Defaults: 3 rounds, 10 steps of small (T = 256, as bench-mp.sh), 3 of
# gpt2-124m (T = 1024); micro-batch 4. Then the OpenMP parallel regions per
# step of each build (bench-omp-count.sh, small, 2 threads).
# Beside the wall clock, each run's tokens per CPU second of its 2 threads
# (/usr/bin/time over the whole run, set-up and the first step included):
# the figure to read when other jobs share the cores. MODELS and PRECS in
# the environment narrow the runs (default "small gpt2-124m", "fp32 bf16").
# Writes outputs/bench-fused/ (runs, results.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BUILD AFTER_BUILD [REPS] [STEPS_SMALL] [STEPS_GPT2]" >&2; exit 2; }
BEFORE=$1 AFTER=$2
REPS=${3:-3}
STEPS_SMALL=${4:-10}
STEPS_GPT2=${5:-3}
for b in "$BEFORE" "$AFTER"; do
  [ -x "$b/bin/meshtrain" ] || { echo "bench-fused: no meshtrain in $b/bin" >&2; exit 2; }
done
OUT=outputs/bench-fused
mkdir -p "$OUT"
rm -f "$OUT/results.jsonl"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_PLACES=cores OMP_PROC_BIND=close OMP_WAIT_POLICY=passive
source apps/scripts/env.sh "$AFTER" >/dev/null
corpus="$OUT/corpus.txt"
[ -f "$corpus" ] || "$AFTER/bin/meshdata" corpus "$corpus" --bytes 2000000 >/dev/null
echo "cpu: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'); load before: $(uptime)"
train() { # BUILD NAME STEPS ARGS...: prints the median tokens/s of steps 2.. and the
  # run's tokens per CPU second of a thread
  local build=$1 name=$2 steps=$3; shift 3
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 taskset -c 0-1 \
    /usr/bin/time -f "%U %S" -o "$OUT/$name.time" mpirun --oversubscribe --bind-to none -n 1 "$build/bin/meshtrain" --set data.train="$corpus" \
    --set train.global_batch=4 --set train.micro_batch=4 --set train.steps="$steps" \
    --set train.eval_every=0 --set ckpt.mode=none --set train.threads=2 \
    --set output.dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 \
    || { cat "$OUT/$name.log"; echo "run $name failed" >&2; exit 1; }
  python3 - "$OUT/$name/metrics.jsonl" "$OUT/$name.time" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
later = recs[1:] if len(recs) > 1 else recs
user, sys_ = map(float, open(sys.argv[2]).read().split()[-2:])
print(statistics.median(r["tokens_per_s"] for r in later), sum(r["tokens"] for r in recs) / ((user + sys_) / 2))
PY
}
for model in ${MODELS:-small gpt2-124m}; do
  if [ "$model" = small ]; then steps=$STEPS_SMALL T=256; else steps=$STEPS_GPT2 T=1024; fi
  for prec in ${PRECS:-fp32 bf16}; do
    for rep in $(seq 1 "$REPS"); do
      for side in before after; do
        if [ "$side" = before ]; then b=$BEFORE; else b=$AFTER; fi
        read -r tps cpu_tps < <(train "$b" "${model}_${prec}_${side}_$rep" "$steps" \
          --set model.preset="$model" --set model.seq_len=$T --set train.precision="$prec")
        echo "{\"model\": \"$model\", \"T\": $T, \"precision\": \"$prec\", \"side\": \"$side\"," \
          "\"rep\": $rep, \"tokens_per_s\": $tps, \"tokens_per_cpu_s\": $cpu_tps}" >> "$OUT/results.jsonl"
      done
    done
  done
done
echo "load after: $(uptime)"
python3 - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n%-10s %5s %5s | %-30s | %-30s" % ("model", "T", "prec", "wall: before after ratio",
                                            "CPU clock: before after ratio"))
keys = sorted({(r["model"], r["T"], r["precision"]) for r in rows},
              key=lambda k: (k[0] != "small", k[2]))
def side(sel, name, key):
    return {r["rep"]: r[key] for r in sel if r["side"] == name}
for k in keys:
    sel = [r for r in rows if (r["model"], r["T"], r["precision"]) == k]
    cols = []
    for key in ("tokens_per_s", "tokens_per_cpu_s"):
        b, a = side(sel, "before", key), side(sel, "after", key)
        ratio = statistics.median(a[i] / b[i] for i in b)
        cols.append("%8.1f %8.1f %6.3f" % (statistics.median(b.values()),
                                          statistics.median(a.values()), ratio))
    print("%-10s %5d %5s | %-30s | %-30s" % (k[0], k[1], k[2], cols[0], cols[1]))
print("(1 rank x 2 threads pinned, micro-batch 4; tokens/s: wall, the median of steps 2.. per run;"
      " CPU clock, the run's tokens per CPU second of a thread; medians over rounds, ratio: the"
      " median of the rounds' after/before)")
PY
for side in before after; do
  if [ "$side" = before ]; then b=$BEFORE; else b=$AFTER; fi
  echo
  echo "== OpenMP regions per step, $side ($b)"
  BUILD=$b bash apps/scripts/bench-omp-count.sh small 2 2
done
