# Stop means stop, on a real Slurm with meshtrain itself. USR1 to the running
# job's batch script (scancel --batch --signal=USR1: what --signal=B:USR1@S
# sends before the walltime) checkpoints and requeues; then `scancel JOBID`
# (SIGTERM) checkpoints and ends the job for good: CANCELLED, not requeued,
# status "cancelled after a checkpoint at step N" with that checkpoint
# complete, summary.json's attempts ending with exit codes 75 then 76.
# Then the job script submitted again resumes from that checkpoint, and
# `scancel --signal=TERM JOBID` (TERM to the steps only, no SIGKILL after
# KillWait: for checkpoints that take longer) stops it the same way.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
corpus=$(mt_corpus 200000)
run="$WORK/run"
# many steps: the job is still training when each signal comes
python3 "$MT_SRC/slurm/meshslurm.py" render train --system local --nodes 1 --time 00:05:00 --bin "$MT_BIN" \
  --run-dir "$run" --set model.preset=tiny --set train.steps=100000 --set train.global_batch=8 \
  --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1 --set data.train="$corpus" \
  --set ckpt.mode=per-writer > /dev/null || fail "render"
jid=$(cluster_submit "$run/job.sh")
echo "submitted job $jid"
lines() { [ -f "$run/metrics.jsonl" ] && wc -l < "$run/metrics.jsonl" || echo 0; }
wait_lines() {  # wait_lines N: until metrics.jsonl has N lines
  local i
  for i in $(seq 1 400); do [ "$(lines)" -ge "$1" ] && return 0; sleep 0.5; done
  cat "$run"/slurm-*.out; fail "the job never reached step $1 (state: $(cluster_state "$jid"))"
}

# 1. USR1: checkpoint, exit 75, requeue, resume
wait_lines 10
echo "job $jid at step ~$(lines): USR1 to its batch script"
scancel --batch --signal=USR1 "$jid" || fail "scancel --batch --signal=USR1 failed"
for _ in $(seq 1 120); do grep -q '^requeued' "$run/status" 2>/dev/null && break; sleep 0.5; done
grep -q '^requeued: checkpointed (exit 75) at step [0-9]*$' "$run/status" ||
  { cat "$run"/slurm-*.out; fail "no requeue after USR1: status '$(cat "$run/status")'"; }
first=$(sed 's/.* at step //' "$run/status")
[ -f "$run/checkpoints/step_$first/MANIFEST.json" ] || fail "USR1: no complete checkpoint at step $first"
echo "USR1: checkpoint at step $first, requeued"

# 2. the requeued job resumes and trains; then scancel: checkpoint, end for good
wait_lines $((first + 10))
grep -q 'restart=1 running' "$run/jobs.log" || fail "the job did not restart after the requeue"
echo "job $jid (restart 1) at step ~$(lines): scancel"
scancel "$jid" || fail "scancel failed"
st=$(cluster_wait "$jid" 120)
echo "final state: $st"
# the state reads CANCELLED at once; the script ends after the checkpoint
for _ in $(seq 1 120); do grep -q '^cancelled' "$run/status" && break; sleep 0.5; done
sleep 3  # the state settles (a requeue would show at once: PENDING, not CANCELLED)
st2=$(cluster_state "$jid")
cat "$run"/slurm-*.out | tail -12
echo "--- jobs.log"; cat "$run/jobs.log"
[ "${st%% *}" = CANCELLED ] || fail "scancel: the job ended '$st', expected CANCELLED"
[ "$st2" = "$st" ] && [ "${st##* }" = 1 ] || fail "after scancel the job came back: '$st' then '$st2'"
status=$(cat "$run/status")
[[ "$status" =~ ^cancelled\ after\ a\ checkpoint\ at\ step\ ([0-9]+)$ ]] || fail "status '$status'"
n=${BASH_REMATCH[1]}
[ "$n" -gt "$first" ] || fail "cancelled at step $n, not after the resumed steps (USR1 at $first)"
[ "$(cat "$run/checkpoints/latest")" = "step_$n" ] || fail "latest is '$(cat "$run/checkpoints/latest")', not step_$n"
"$MT_BIN/meshckpt" verify "$run/checkpoints/step_$n" > "$WORK/verify.log" 2>&1 ||
  { cat "$WORK/verify.log"; fail "the checkpoint scancel left does not verify"; }
[ "$(lines)" = "$n" ] || fail "metrics.jsonl has $(lines) steps, the checkpoint $n: steps after it were trained"
[ "$(grep -c 'requeued: checkpointed' "$run/jobs.log")" = 1 ] || fail "requeued more than once"
grep -q 'cancelling: SIGTERM received' "$run/jobs.log" || fail "jobs.log lacks the SIGTERM"
grep -q "cancelled: the application wrote a checkpoint at step $n and stopped (exit 76); not requeued" \
  "$run"/slurm-*.out || fail "the job log does not explain the cancel"
grep -q "cancelled by SIGTERM after step $n (checkpointed); exiting with code 76" "$run"/slurm-*.out ||
  fail "meshtrain did not say it was cancelled"
python3 - "$run/summary.json" "$first" "$n" <<'PY' || fail "summary.json attempts"
import json, sys
s = json.load(open(sys.argv[1]))
first, n = int(sys.argv[2]), int(sys.argv[3])
a = [(x["start_step"], x["end_step"], x["exit_code"]) for x in s["attempts"]]
print("attempts:", a)
assert a == [(0, first, 75), (first, n, 76)], a
assert s["run"]["steps"] == n and s["run"]["restarts"] == 1, s["run"]
PY

# 3. sbatch job.sh again: it resumes; scancel --signal=TERM ends it the same way
jid2=$(cluster_submit "$run/job.sh")
wait_lines $((n + 5))
grep -q "resuming from $run/checkpoints/latest" "$run"/slurm-"$jid2".out || fail "the resubmitted job did not resume"
scancel --signal=TERM "$jid2" || fail "scancel --signal=TERM failed"
st=$(cluster_wait "$jid2" 120)
echo "resubmitted job $jid2: $st; status: $(cat "$run/status")"
[ "${st% *}" = "FAILED 76:0" ] || fail "scancel --signal=TERM: the job ended '$st', expected FAILED 76:0"
[[ "$(cat "$run/status")" =~ ^cancelled\ after\ a\ checkpoint\ at\ step\ ([0-9]+)$ ]] || fail "status '$(cat "$run/status")'"
n2=${BASH_REMATCH[1]}
[ "$n2" -gt "$n" ] && [ "$(lines)" = "$n2" ] || fail "second cancel at step $n2, metrics $(lines), first $n"
python3 -c "
import json; a = json.load(open('$run/summary.json'))['attempts']
assert [(x['start_step'], x['exit_code']) for x in a][1:] == [($first, 76), ($n, 76)], a" || fail "summary.json attempts after the resubmission"
echo "PASS: USR1 -> checkpoint at $first, requeued; scancel -> checkpoint at $n, CANCELLED for good;" \
  "resubmitted -> resumed; scancel --signal=TERM -> checkpoint at $n2"
