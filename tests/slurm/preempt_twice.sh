# A campaign point preempted twice on a real Slurm, meshtrain itself: USR1 to
# the running job's batch script (scancel --batch --signal=USR1, what
# --signal=B:USR1@S sends before the walltime) -> the trap forwards it ->
# meshtrain checkpoints and exits 75 -> the job requeues -> the restart
# resumes (train.resume=auto); twice, then it finishes and the campaign's
# report job runs. Checked: the losses equal an uninterrupted run's; the
# job log explains exit 75; summary.json's run totals (steps, tokens,
# restarts) cover all three attempts, which chain step to step; and the
# report's tokens/s for the point equals tokens / time over every step of
# metrics.jsonl, with the restarts listed.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
steps=${MT_REQUEUE_STEPS:-150}
corpus=$(mt_corpus 200000)
cat > "$WORK/sweep.ini" <<INI
[campaign]
name = preempt-twice
system = local
ranks = 4
steps = $steps
time = 00:05:00

[set]
model.preset = tiny
train.global_batch = 16
train.micro_batch = 4
train.eval_every = 50
train.threads = 1
data.train = $corpus
# per-writer: the shared-file (MPI-IO) mode takes ~15 s per save between the
# two emulated nodes of this host (0.3 s per-writer); what is tested here is
# signal -> checkpoint -> requeue -> resume, and the report of it
ckpt.mode = per-writer
INI
# a 50 ms pause after each step (the job inherits it from sbatch): each signal
# lands at the step this script chose on a machine of any speed
MT_TEST_STEP_SLEEP_S=0.05 python3 "$MT_SRC/slurm/meshslurm.py" campaign "$WORK/sweep.ini" --out "$WORK/camp" \
  --bin "$MT_BIN" --submit > "$WORK/submit.log" 2>&1 || { cat "$WORK/submit.log"; fail "campaign --submit failed"; }
run="$WORK/camp/points/n2-r4-dp4-tp1-pp1-cp1-rep0"
jid=$(awk '$2 != "report" {print $1}' "$WORK/camp/jobs.txt")
rid=$(awk '$2 == "report" {print $1}' "$WORK/camp/jobs.txt")
echo "point job $jid, report job $rid"

lines() { [ -f "$run/metrics.jsonl" ] && wc -l < "$run/metrics.jsonl" || echo 0; }
# preempt WHEN_LINES: wait until metrics.jsonl has that many lines, then USR1
preempt() {
  local want=$1 i
  for i in $(seq 1 $((2 * ${MT_TIMEOUT:-300}))); do  # the hang guard: 0.5 s a turn
    [ "$(lines)" -ge "$want" ] && break
    sleep 0.5
  done
  local n; n=$(lines)
  [ "$n" -ge "$want" ] || { cat "$run"/slurm-*.out; fail "the job never reached step $want"; }
  [ "$n" -lt "$steps" ] || fail "the job finished before it could be signalled; raise the steps"
  echo "job $jid at step ~$n of $steps: USR1 to its batch script"
  scancel --batch --signal=USR1 "$jid" || fail "scancel --batch --signal=USR1 failed"
  # the requeue: the status says so before the restart starts
  for i in $(seq 1 $((2 * ${MT_TIMEOUT:-300}))); do grep -q '^requeued' "$run/status" 2>/dev/null && return 0; sleep 0.5; done
  cat "$run"/slurm-*.out; fail "no requeue after the signal"
}
preempt 25
first=$(lines)
preempt $((first + 25))

st=$(cluster_wait "$rid" 300)
echo "report job: $st"
echo "--- jobs.log"; cat "$run/jobs.log"
[ "${st% *}" = "COMPLETED 0:0" ] || { cat "$run"/slurm-*.out "$WORK"/camp/report/slurm-*.out; fail "report job ended '$st'"; }
st=$(cluster_state "$jid")
# The local cluster's known fault: now and then a rank of an attempt dies of
# a segmentation fault as it starts under srun --mpi=pmix (no frame of
# meshtrain's in its backtrace; cause not found). The job script requeues
# it from its checkpoint, as it should, but the attempts this test counts
# are then not the preemptions': say so and skip, rather than pass or fail.
if grep -q 'requeued: failed (exit 139)' "$run/jobs.log" && grep -q 'Signal: Segmentation fault' "$run"/slurm-*.out; then
  grep -B1 -A5 'Process received signal' "$run"/slurm-*.out | head -20
  skip "a rank crashed at start (exit 139, the local cluster's srun/pmix fault) and the job requeued it: the attempts are not the two preemptions'"
fi
[ "${st% *}" = "COMPLETED 0:0" ] && [ "${st##* }" = 2 ] || fail "point job: '$st', expected COMPLETED 0:0 after 2 restarts"
[ "$(grep -c 'requeued: checkpointed (exit 75)' "$run/jobs.log")" = 2 ] || fail "jobs.log lacks two requeues"
grep -q 'restart=2 done' "$run/jobs.log" || fail "jobs.log lacks the finished second restart"
# (summed over the job's logs: where scontrol requeue loses a race on a busy
# machine the wrapper also resubmits, and that job writes a log of its own)
[ "$(cat "$run"/slurm-*.out | grep -Ec 'the application wrote a checkpoint at step [0-9]+ and stopped \(exit 75')" = 2 ] ||
  fail "the job log does not explain exit 75 twice"

# the same run without interruption ends with the same losses
source "$MT_SRC/apps/scripts/env.sh" "$(dirname "$MT_BIN")"
mapfile -t SETS < <(sed -n 's/^  --set \(.*\)$/\1/p' "$run/job.sh" | grep -v '^output.dir=')
mt_mpirun 4 "$MT_BIN/meshtrain" "$run/input.ini" "${SETS[@]/#/--set=}" --set output.dir="$WORK/ref" \
  > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "uninterrupted mpirun run failed"; }

python3 - "$run" "$WORK/ref" "$WORK/camp/report" "$steps" <<'PY' || fail "summary or report of the preempted run"
import csv, json, math, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import same_bits
run, ref, rep, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = json.load(open(os.path.join(run, "summary.json")))
m = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
r = [json.loads(l) for l in open(os.path.join(ref, "metrics.jsonl"))]
assert [x["step"] for x in m] == list(range(1, steps + 1)), "metrics.jsonl: steps lost or repeated"
assert len(m) == len(r) and all(same_bits(x["loss"], y["loss"]) for x, y in zip(m, r)), \
    "losses differ from the uninterrupted run (or one is null)"
assert same_bits(s["final_loss"], json.load(open(os.path.join(ref, "summary.json")))["final_loss"])
a, t = s["attempts"], s["run"]
print("attempts:", [(x["start_step"], x["end_step"], x["exit_code"]) for x in a])
print("run:", t)
assert len(a) == 3 and t["attempts"] == 3 and t["restarts"] == 2, "not 3 attempts / 2 restarts"
assert [x["exit_code"] for x in a] == [75, 75, 0], "exit codes"
assert a[0]["start_step"] == 0 and a[-1]["end_step"] == steps
for x, y in zip(a, a[1:]):  # each preemption checkpointed its last step: nothing recomputed
    assert y["start_step"] == x["end_step"] == x["last_checkpoint_step"], (x, y)
    assert y["recomputed_steps"] == 0
tokens_per_step = s["tokens_per_step"]
assert t["steps"] == steps and t["computed_steps"] == steps, "run steps"
assert t["tokens"] == steps * tokens_per_step == sum(x["tokens"] for x in a) == sum(x["tokens"] for x in m)
assert all(x["setup_s"] > 0 and x["wall_s"] >= x["setup_s"] for x in a)
assert math.isclose(t["lost_s"], a[1]["setup_s"] + a[2]["setup_s"], rel_tol=1e-9), "lost_s"
assert t["requeue_wait_s"] > 0, "no time between attempts"
# tokens/s over every step of every attempt, from metrics.jsonl
want = sum(x["tokens"] for x in m) / sum(x["step_s"] for x in m)
assert math.isclose(t["tokens_per_s"], want, rel_tol=1e-9), (t["tokens_per_s"], want)
row = next(csv.DictReader(open(os.path.join(rep, "summary.csv"))))
assert math.isclose(float(row["tokens_per_s_mean"]), want, rel_tol=1e-6), (row["tokens_per_s_mean"], want)
runs = next(csv.DictReader(open(os.path.join(rep, "runs.csv"))))
assert runs["restarts"] == "2" and runs["attempts"] == "3", runs
md = open(os.path.join(rep, "report.md")).read()
assert "| 2 restarts" in md and "## Runs in several attempts" in md, "report.md lacks the restarts"
steps_csv = list(csv.DictReader(open(os.path.join(rep, "steps.csv"))))
assert len(steps_csv) == steps and all(
    math.isclose(float(x["loss"]), y["loss"], rel_tol=1e-8) for x, y in zip(steps_csv, m)), "steps.csv losses"
assert sorted({x["attempt"] for x in steps_csv}) == ["1", "2", "3"], "steps.csv attempts"
for png in ("loss.png", "tokens_per_s.png"):
    assert open(os.path.join(rep, png), "rb").read(4) == b"\x89PNG", png
print("tokens/s over all %d steps: %.1f (summary.json run, report, metrics.jsonl agree)" % (steps, want))
PY
echo "PASS: preempted twice -> 3 attempts, same losses, whole-run summary and report"
