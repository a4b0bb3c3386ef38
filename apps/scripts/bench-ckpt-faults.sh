#!/usr/bin/env bash
# How fast a one-rank disk error ends the job: the save of step 2 fails on the
# last rank (MT_CKPT_FAULT, ENOSPC at its first write); the figure is the time
# from the error to the last rank's own exit (mpirun is told not to kill the
# others), against a good save of the same state in the same run (step 1).
#   apps/scripts/bench-ckpt-faults.sh [BUILD_DIR] [RANKS] [MODEL] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
NP=${2:-4}
MODEL=${3:-small}
REPS=${4:-3}
source apps/scripts/env.sh "$BUILD" >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_orte_abort_on_non_zero_status=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-ckpt-faults.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$BUILD/bin/meshdata" corpus "$WORK/corpus.txt" --bytes 2000000 >/dev/null
LAST=$((NP - 1))
printf "# %-11s %12s %16s %8s   (%d ranks, %s, median of %d)\n" mode save_s error_to_exit_s ratio \
  "$NP" "$MODEL" "$REPS"
for mode in shared per-writer async; do
  M=(--set ckpt.mode=per-writer)
  [ "$mode" = shared ] && M=(--set ckpt.mode=shared)
  [ "$mode" = async ] && M+=(--set ckpt.async=true)
  lags=() saves=()
  for rep in $(seq "$REPS"); do
    out="$WORK/$mode-$rep"
    rm -f "$WORK/exits" "$WORK/stamp"
    MT_EXITS="$WORK/exits" MT_CKPT_FAULT="rank=$LAST,op=write,errno=ENOSPC,step=2,stamp=$WORK/stamp" \
      timeout 600 mpirun --oversubscribe -n "$NP" \
      sh -c '"$0" "$@"; echo "$? $(date +%s.%N)" >> "$MT_EXITS"' "$BUILD/bin/meshtrain" \
      --set model.preset="$MODEL" --set data.train="$WORK/corpus.txt" --set train.eval_every=0 \
      --set train.global_batch="$NP" --set train.micro_batch=1 --set parallel.dp="$NP" \
      --set train.steps=3 --set ckpt.every=1 "${M[@]}" --set output.dir="$out" \
      > "$WORK/log" 2>&1 || true
    [ "$(awk '$1 == 3' "$WORK/exits" | wc -l)" -eq "$NP" ] || { cat "$WORK/log"; echo "not every rank exited with 3" >&2; exit 1; }
    lags+=("$(awk 'NR == FNR { t = $2; next } { if ($2 - t > m) m = $2 - t } END { printf "%.3f", m }' "$WORK/stamp" "$WORK/exits")")
    # the good save of step 1: blocking, or written in the background (async)
    saves+=("$(grep -Eo 'step_1 (written|committed \(written in the background) in [0-9.]+' \
      "$WORK/log" | awk '{print $NF}' | head -1)")
  done
  median() { printf "%s\n" "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
  lag=$(median "${lags[@]}")
  save=$(median "${saves[@]}")
  printf "  %-11s %12s %16s %8.2f\n" "$mode" "$save" "$lag" "$(awk -v a="$lag" -v b="$save" 'BEGIN { print (b > 0 ? a / b : 0) }')"
done
