# SIGTERM mid-run (what scancel sends every task) without Slurm: every rank
# stops at the next step boundary, checkpoints and exits 76 (cancelled for
# good), not 75 (requeue), and says so; USR1 keeps 75 (tests/ckpt/signal.sh).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
"${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" --set model.preset=tiny \
  --set train.steps=100000 \
  --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1 \
  --set parallel.dp=2 --set data.train="$corpus" --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null || true' EXIT
mt_signal_rank TERM "$WORK/run" "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
tail -3 "$WORK/run.log"
[ $rc -eq 76 ] || fail "SIGTERM: exit code $rc, expected 76"
step=$(wc -l < "$WORK/run/metrics.jsonl")
grep -q "cancelled by SIGTERM after step $step (checkpointed); exiting with code 76" "$WORK/run.log" ||
  fail "no cancel line for step $step"
[ "$(cat "$WORK/run/checkpoints/latest")" = "step_$step" ] || fail "latest is not step_$step"
[ -f "$WORK/run/checkpoints/step_$step/MANIFEST.json" ] || fail "no complete checkpoint at step $step"
python3 -c "import json,sys; a=json.load(open('$WORK/run/summary.json'))['attempts']; sys.exit(a[-1]['exit_code'] != 76)" ||
  fail "summary.json: the attempt's exit code is not 76"
echo "PASS: SIGTERM at step ~$step -> checkpoint, exit 76"
