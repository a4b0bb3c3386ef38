# A rank killed (SIGKILL; the test hook MT_TEST_DIE, once) while a
# background checkpoint is being written: under mpirun the job ends at once
# (exit 137, the launcher's); the newest complete checkpoint is the one
# before (step 2: step 4's was in flight) and verifies; `latest` names it;
# and the run resumed from it follows the loss curve of a run never
# interrupted, bit for bit. (On Slurm, tests/slurm/lost_rank.sh: the job
# script requeues by itself.)
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
base=(--set model.preset=tiny --set train.steps=8 --set train.global_batch=8
      --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=0
      --set parallel.dp=2 --set ckpt.mode=per-writer --set ckpt.async=true --set ckpt.every=2
      --set ckpt.keep=0)
set +e
MT_TEST_DIE="1:5:$WORK/died" mt_mpirun 2 "$MT_BIN/meshtrain" "${base[@]}" \
  --set output.dir="$WORK/run" > "$WORK/killed.log" 2>&1
rc=$?
set -e
[ -e "$WORK/died" ] || { cat "$WORK/killed.log"; fail "the hook never fired"; }
[ "$rc" -ne 0 ] || fail "the job went on without rank 1"
echo "killed at step 5: exit $rc"
[ "$(cat "$WORK/run/checkpoints/latest")" = step_2 ] \
  || fail "latest names '$(cat "$WORK/run/checkpoints/latest")', expected step_2"
"$MT_BIN/meshckpt" verify "$WORK/run/checkpoints/step_2" > /dev/null || fail "step_2 does not verify"
mt_train resumed 2 "${base[@]}" --set output.dir="$WORK/run" --set train.resume=auto
grep -q 'resumed from .*step_2' "$WORK/resumed.log" || fail "did not resume from step_2"
mt_train straight 2 "${base[@]}" --set output.dir="$WORK/straight"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/straight" "$WORK/run" --bitwise \
  || fail "the resumed run left the loss curve"
echo OK
