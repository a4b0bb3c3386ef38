# A lost rank on a real Slurm: rank 1 of 4 (2 emulated nodes x 2 ranks)
# kills itself (SIGKILL; the test hook MT_TEST_DIE, once) at step 5 of 8.
# srun (--kill-on-bad-exit, which the job script adds) ends the step; the
# job script sees a failure with a checkpoint to resume from (step 4),
# requeues, and the second attempt resumes and finishes. Checked: the
# newest checkpoint at the failure verifies, jobs.log tells the story, and
# the losses equal an uninterrupted mpirun run's, bit for bit.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
corpus=$(mt_corpus 200000)
TRAIN=(--set model.preset=tiny --set train.steps=8 --set train.global_batch=8
       --set train.micro_batch=2 --set train.eval_every=0 --set data.train="$corpus"
       --set train.threads=1 --set ckpt.every=2 --set ckpt.mode=per-writer --set ckpt.keep=0)
python3 "$MT_SRC/slurm/meshslurm.py" render train --system local --nodes 2 --time 00:05:00 \
  --bin "$MT_BIN" --run-dir "$WORK/run" "${TRAIN[@]}" > /dev/null || fail "render"
jid=$(MT_TEST_DIE="1:5:$WORK/died" cluster_submit "$WORK/run/job.sh")
st=$(cluster_wait "$jid" 300)
echo "job $jid: $st"; echo "--- jobs.log"; cat "$WORK/run/jobs.log"
[ -e "$WORK/died" ] || fail "the hook never fired"
[ "${st% *}" = "COMPLETED 0:0" ] && [ "${st##* }" = 1 ] \
  || { cat "$WORK"/run/slurm-*.out; fail "job: '$st', expected COMPLETED 0:0 after 1 restart"; }
grep -Eq 'requeued: failed \(exit [0-9]+\), resumes from step 4' "$WORK/run/jobs.log" \
  || fail "jobs.log lacks the requeue after the failure"
grep -q 'restart=1 done' "$WORK/run/jobs.log" || fail "jobs.log lacks the finished restart"
[ "$(cat "$WORK/run/failures")" = 1 ] || fail "failures: $(cat "$WORK/run/failures")"
"$MT_BIN/meshckpt" verify "$WORK/run/checkpoints/step_4" > /dev/null \
  || fail "the checkpoint at the failure does not verify"

source "$MT_SRC/apps/scripts/env.sh" "$(dirname "$MT_BIN")"
mt_train straight 4 --set parallel.dp=4 "${TRAIN[@]}" --set output.dir="$WORK/straight"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/straight" "$WORK/run" --bitwise \
  || fail "the requeued run left the loss curve"
echo "PASS: a lost rank ended the step, the job requeued and resumed on the same curve"
