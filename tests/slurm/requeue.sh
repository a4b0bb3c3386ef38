# Preemption on a real Slurm, the contract played by a stand-in application
# (tests/slurm/fake_bin/meshtrain): USR1 to a running job's batch script
# (scancel --batch --signal=USR1, what --signal=B:USR1@S sends before the
# walltime) -> the trap forwards it -> the application checkpoints and exits
# 75 -> the script requeues the job -> the restart passes train.resume=auto
# -> it finishes like an uninterrupted run. preempt_twice.sh does the same
# with meshtrain itself, twice, in a campaign.
MT_SUFFIX=stub
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
GEN="python3 $MT_SRC/slurm/meshslurm.py"
bin="$MT_SRC/tests/slurm/fake_bin" steps=40 min_lines=5
TRAIN=(--set train.steps=$steps)
$GEN render train --system local --nodes 2 --time 00:05:00 --bin "$bin" --run-dir "$WORK/run" \
  "${TRAIN[@]}" >/dev/null || fail "render"
jid=$(cluster_submit "$WORK/run/job.sh")
echo "submitted job $jid"

# wait until it trains, then preempt it
for i in $(seq 1 $((2 * ${MT_TIMEOUT:-300}))); do  # the hang guard: 0.5 s a turn
  [ -f "$WORK/run/metrics.jsonl" ] && [ "$(wc -l < "$WORK/run/metrics.jsonl")" -ge "$min_lines" ] && break
  [ "$(cluster_state "$jid" | cut -d' ' -f1)" = RUNNING ] || [ "$i" -lt $((2 * ${MT_TIMEOUT:-300})) ] || break
  sleep 0.5
done
[ -f "$WORK/run/metrics.jsonl" ] || { cat "$WORK"/run/slurm-*.out; fail "the job never started training"; }
lines=$(wc -l < "$WORK/run/metrics.jsonl")
[ "$lines" -lt "$steps" ] || fail "the job finished before it could be signalled; raise the steps"
echo "job $jid at step ~$lines of $steps: sending USR1 to its batch script"
scancel --batch --signal=USR1 "$jid" || fail "scancel --batch --signal=USR1 failed"

st=$(cluster_wait "$jid" 200)
echo "final state: $st"
cat "$WORK"/run/slurm-*.out
echo "--- jobs.log"; cat "$WORK/run/jobs.log"
[ "${st% *}" = "COMPLETED 0:0" ] || fail "job ended '$st'"
[ "${st##* }" = 1 ] || fail "expected 1 restart, scontrol says '${st##* }'"
[ -e "$WORK/run/checkpoints/latest" ] || fail "no checkpoints/latest after the signal"
grep -q 'received SIGUSR1; forwarding' "$WORK"/run/slurm-*.out || fail "the trap did not run"
grep -q 'restart=0 requeued: checkpointed (exit 75)' "$WORK/run/jobs.log" || fail "jobs.log lacks the requeue"
grep -q 'restart=1 done' "$WORK/run/jobs.log" || fail "jobs.log lacks the finished restart"
grep -q 'resuming from' "$WORK"/run/slurm-*.out || fail "the restart did not pass train.resume=auto"
[ "$(cat "$WORK/run/status")" = done ] || fail "status is '$(cat "$WORK/run/status")'"

# every step ran exactly once across the two attempts
python3 - "$WORK/run/metrics.jsonl" "$steps" <<'PY' || fail "steps lost or repeated"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
n = int(sys.argv[2])
assert steps == list(range(1, n + 1)), "steps %s" % steps
PY
grep -q 'resumed from step' "$WORK/run/resume.log" || fail "the fake app did not resume"
grep -Eq 'the application wrote a checkpoint at step [0-9]+ and stopped \(exit 75' "$WORK"/run/slurm-*.out ||
  fail "the job log does not explain exit 75"
echo "PASS: USR1 -> checkpoint -> exit 75 -> requeue -> resume=auto -> done (stand-in application)"
