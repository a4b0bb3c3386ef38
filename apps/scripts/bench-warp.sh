#!/usr/bin/env bash
# The virtual device at scale (issue: time-warp emulation): a GPT of
# MODEL (7b: L=32 C=4096 H=32; 13b: L=40 C=5120 H=40; T=2048, V=32000) on
# RANKS emulated ranks of PROFILE (h200 or a100-80gb-dgx) at tp x pp x dp
# with the interleaved schedule (2 chunks per stage), ZeRO-1, micro-batch 1,
# 3 steps, on this machine. Prints the wall time of the whole mpirun, the
# set-up (every rank's MPI start, mesh, plan check, model) and the step
# loop, the peak resident memory of all ranks together (sampled every 0.5 s
# from /proc) and of the largest rank, and the virtual step time, tokens/s
# and MFU of the emulated run next to meshplan's analytic figures for the
# same layout. With MT_TIMELINE=1 the run is traced (metrics.trace = true)
# and meshreport timeline draws its last step per pipeline stage
# ($OUT/run/timeline/timeline.png). Not a test (timings): figures for the note.
#   apps/scripts/bench-warp.sh [RANKS=512] [TP=8] [PP=8] [MODEL=7b] [PROFILE=h200] [GLOBAL_BATCH=64]
set -euo pipefail
cd "$(dirname "$0")/../.."
RANKS=${1:-512} TP=${2:-8} PP=${3:-8} MODEL=${4:-7b} PROFILE=${5:-h200} GB=${6:-64}
BIN=${MT_BIN:-build/bin}
DP=$((RANKS / (TP * PP)))
OUT=${MT_OUT:-outputs/bench-warp}/$MODEL-$RANKS-tp$TP-pp$PP
rm -rf "$OUT"; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $MODEL in
  7b) shape=(--set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32) ;;
  13b) shape=(--set model.n_layer=40 --set model.n_embd=5120 --set model.n_head=40) ;;
  *) echo "MODEL: 7b or 13b" >&2; exit 2 ;;
esac
corpus=$OUT/../corpus.txt
[ -f "$corpus" ] || "$BIN/meshdata" corpus "$corpus" --bytes 4000000 > /dev/null
args=(--set model.preset=custom "${shape[@]}" --set model.seq_len=2048 --set model.vocab_size=32000
      --set data.train="$corpus" --set train.steps=3 --set train.eval_every=0 --set ckpt.mode=none
      --set train.micro_batch=1 --set train.global_batch="$GB" --set train.device=virtual
      --set train.virtual_hw="$PROFILE" --set parallel.tp="$TP" --set parallel.pp="$PP"
      --set parallel.dp="$DP" --set parallel.zero=1 --set parallel.schedule=interleaved
      --set parallel.virtual_stages=2 --set output.dir="$OUT/run")
[ "${MT_TIMELINE:-0}" = 0 ] || args+=(--set metrics.trace=true)
# the layout and whether this machine can start the ranks, before minutes of
# start-up (one line and exit 2 when not)
"$BIN/meshtrain" --check --ranks "$RANKS" "${args[@]}"
# the ranks' memory, summed, every 0.5 s while the run lasts: proportional
# set size (shared pages split between the processes that map them: the
# libraries, the corpus, MPI's shared-memory segments) and the largest
# rank's resident set
sample() {
  local most=0 top=0
  while [ -f "$OUT/.running" ]; do
    read -r sum big < <(for p in $(pgrep -f "^$BIN/meshtrain .*output.dir=$OUT/run"); do
        awk '/^(Pss|Rss):/ {v[$1] = $2} END {print v["Pss:"] + 0, v["Rss:"] + 0}' /proc/$p/smaps_rollup 2>/dev/null
      done | awk '{s += $1; if ($2 > b) b = $2} END {print s + 0, b + 0}')
    [ "$sum" -gt "$most" ] && most=$sum
    [ "$big" -gt "$top" ] && top=$big
    sleep 0.5
  done
  echo "$most $top" > "$OUT/rss_kib"
}
touch "$OUT/.running"; sample & sampler=$!
t0=$(date +%s.%N)
# niced: the machine is shared
rc=0
# each rank's own exit code into $OUT/exits (mpirun's status alone cannot
# tell a rank's failure from the launcher's)
export MT_EXITS="$OUT/exits"
nice -n 19 mpirun --oversubscribe --bind-to none -n "$RANKS" ${MT_MPI_ARGS:-} \
  sh -c '"$0" "$@"; rc=$?; echo "$rc" >> "$MT_EXITS"; exit $rc' "$BIN/meshtrain" "${args[@]}" \
  > "$OUT/log" 2>&1 || rc=$?
t1=$(date +%s.%N)
rm -f "$OUT/.running"; wait $sampler
# (at 512 ranks mpirun once reported a rank "exiting improperly" after
# summary.json was written: the figures stand, the exit code is shown)
[ -f "$OUT/run/summary.json" ] || { tail -20 "$OUT/log"; exit 1; }
zeros=$(grep -c '^0$' "$OUT/exits" 2>/dev/null || true)
echo "ranks that exited 0: $zeros of $RANKS"
if [ $rc -ne 0 ]; then
  echo "mpirun exited with $rc after the run wrote summary.json: $(grep -m1 'exiting improperly' "$OUT/log" || tail -1 "$OUT/log")"
  [ "$zeros" = "$RANKS" ] && echo "  (every rank finalized and exited 0: Open MPI 4's launcher race at shutdown, which reports a rank 'with PID 0' exiting improperly; ompi issues 7833, 9389)"
fi
"$BIN/meshplan" --set model.preset=custom "${shape[@]}" --set model.seq_len=2048 --set model.vocab_size=32000 \
  --set train.micro_batch=1 --set train.global_batch="$GB" --set parallel.tp="$TP" --set parallel.pp="$PP" \
  --set parallel.dp="$DP" --set parallel.zero=1 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --hw "$PROFILE" --only > "$OUT/meshplan.json"
python3 - "$OUT" "$t0" "$t1" "$RANKS" <<'PY'
import json, sys
out, t0, t1, ranks = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = json.load(open(out + "/run/summary.json"))
v = s["virtual"]
last = [json.loads(l) for l in open(out + "/run/metrics.jsonl")][-1]
most, top = (int(x) for x in open(out + "/rss_kib").read().split())
print("%s: %d ranks (tp %d x pp %d x dp %d, interleaved, ZeRO-1), %s profile" % (
    s["model"], ranks, s["layout"]["tp"], s["layout"]["pp"], s["layout"]["dp"], v["hw"]))
print("  wall: %.1f s in all (mpirun), set-up %.1f s (rank 0), step loop %.1f s (3 steps)" % (
    t1 - t0, v["setup_wall_s"], v["loop_wall_s"]))
print("  memory: %.2f GiB at most, all ranks together (proportional set size, sampled); largest rank %.1f MiB resident" % (
    most / 2**20, top / 2**10))
print("  virtual: step %.3f s, %.0f tokens/s, MFU %.3f; %d causality checks, %d violations" % (
    last["step_s"], last["tokens_per_s"], last["mfu"], v["causality_checks"], v["causality_violations"]))
a = json.load(open(out + "/meshplan.json"))
print("  meshplan (analytic): step %.3f s, %.0f tokens/s, MFU %.3f (virtual/analytic %.3f)" % (
    a["step_s"], a["tokens_per_s"], a["mfu"], last["step_s"] / a["step_s"]))
PY
[ "${MT_TIMELINE:-0}" = 0 ] || "$BIN/meshreport" timeline "$OUT/run"
