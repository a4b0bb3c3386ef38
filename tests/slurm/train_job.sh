# The rendered `local` train job on a real Slurm: tiny on 2 emulated nodes x 2
# ranks, against the same run under mpirun (same layout and threads: the
# losses must be bitwise equal). Then a rendered leonardo-booster 1-node script
# (QoS, account, 4 GPUs, 8 CPUs per task, --mem=494000, its modules, TMPDIR on
# the scratch file system) runs on the same cluster with only the env file and
# launcher swapped for the local ones, `module` a stub that loads anything and
# $CINECA_SCRATCH a directory of the test, as a LEONARDO login shell passes them.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
corpus=$(mt_corpus 200000)
GEN="python3 $MT_SRC/slurm/meshslurm.py"
TRAIN=(--set model.preset=tiny --set train.steps=6 --set train.global_batch=8 --set train.micro_batch=2
       --set train.eval_every=3 --set data.train="$corpus" --set train.threads=1 --set ckpt.mode=none)

$GEN render train --system local --nodes 2 --time 00:05:00 --bin "$MT_BIN" --run-dir "$WORK/local" \
  "${TRAIN[@]}" >/dev/null || fail "render local"
grep -q -- '--ntasks-per-node=2' "$WORK/local/job.sh" || fail "local script lacks --ntasks-per-node=2"
module() {  # a module system that has every module: records what the job loads
  case "$1" in load) shift; echo "$*" >> "$MODULE_LOG"; export LOADEDMODULES=${LOADEDMODULES:+$LOADEDMODULES:}$1 ;; esac
}
export -f module
export MODULE_LOG="$WORK/module.log" CINECA_SCRATCH="$WORK/scratch"
mkdir -p "$CINECA_SCRATCH"
# (the local cluster's "GPUs" are stand-in devices: the job trains on the
# CPU, as a user's --set overrides the profile's device = cuda)
$GEN render train --system leonardo-booster --nodes 1 --time 00:05:00 --account mt_test \
  --profile-set env_file=slurm/local/env.sh --profile-set "launcher=srun --mpi=pmix" \
  --bin "$MT_BIN" --run-dir "$WORK/leo" "${TRAIN[@]}" --set train.device=cpu \
  --set train.precision=fp32 >/dev/null || fail "render leonardo-booster"
grep -q -- "--set train.device=cuda" "$WORK/leo/job.sh" && fail "the profile's device overrode --set train.device=cpu"

# and a bench job from the same skeleton: allreduce over both emulated nodes
$GEN render bench --system local --nodes 2 --time 00:05:00 --bin "$MT_BIN" --run-dir "$WORK/bench" \
  --bench "allreduce --sizes 4K,1M --iters 3" >/dev/null || fail "render bench"

j1=$(cluster_submit "$WORK/local/job.sh")
j2=$(cluster_submit "$WORK/leo/job.sh")
j3=$(cluster_submit "$WORK/bench/job.sh")
echo "submitted local job $j1, leonardo-booster job $j2, bench job $j3"
s1=$(cluster_wait "$j1" 150); s2=$(cluster_wait "$j2" 150); s3=$(cluster_wait "$j3" 100)
echo "local job: $s1"; echo "leonardo job: $s2"; echo "bench job: $s3"
[ "${s3% *}" = "COMPLETED 0:0" ] || { cat "$WORK"/bench/slurm-*.out; fail "bench job ended '$s3'"; }
python3 -c "
import json
rows = [json.loads(l) for l in open('$WORK/bench/bench.jsonl')]
assert [r['bytes'] for r in rows] == [4096, 1048576] and all(r['ranks'] == 4 and r['wrong'] == 0 for r in rows), rows
" || fail "bench job: bench.jsonl wrong"
[ "${s1% *}" = "COMPLETED 0:0" ] || { cat "$WORK"/local/slurm-*.out; fail "local job ended '$s1'"; }
[ "${s2% *}" = "COMPLETED 0:0" ] || { cat "$WORK"/leo/slurm-*.out; fail "leonardo job ended '$s2'"; }

# the job saw its allocation, ran meshtrain with 4 ranks, and wrote its results
grep -q 'nodes=2 ntasks=4' "$WORK/local/slurm-env.txt" || fail "local job did not get 2 nodes x 2 tasks: $(cat "$WORK/local/slurm-env.txt")"
grep -q 'nodes=1 ntasks=4' "$WORK/leo/slurm-env.txt" || fail "leonardo job did not get 1 node x 4 tasks"
[ "$(cat "$WORK/local/status")" = done ] || fail "status is '$(cat "$WORK/local/status")'"
[ "$(wc -l < "$WORK/local/metrics.jsonl")" -eq 6 ] || fail "expected 6 metrics lines"
grep -q '"world":[[:space:]]*4' "$WORK/local/summary.json" || fail "summary.json: world is not 4"
grep -q '"dp":[[:space:]]*4' "$WORK/local/summary.json" || fail "summary.json: dp is not 4"
grep -q 'meshslurm .* finished' "$WORK"/local/slurm-*.out || fail "job log lacks the finish line"
# on LEONARDO's shape: 8 CPUs per task and all 4 GPUs of the node visible
grep -q '"world":[[:space:]]*4' "$WORK/leo/summary.json" || fail "leonardo summary: world is not 4"
[ "$(wc -l < "$MODULE_LOG")" = 6 ] && grep -q '^nccl/' "$MODULE_LOG" || { cat "$MODULE_LOG"; fail "the leonardo job did not load its 6 run modules"; }
grep -q " tmpdir=$CINECA_SCRATCH/tmp/meshtrain-$j2 " "$WORK/leo/slurm-env.txt" || fail "the leonardo job's TMPDIR: $(cat "$WORK/leo/slurm-env.txt")"
[ ! -e "$CINECA_SCRATCH/tmp/meshtrain-$j2" ] || fail "the leonardo job left its TMPDIR behind"

# the same run under mpirun gives the same losses, bit for bit (with the
# OpenBLAS kernels the job's env file chose)
source "$MT_SRC/apps/scripts/env.sh" "$(dirname "$MT_BIN")"
mt_mpirun 4 "$MT_BIN/meshtrain" --set parallel.dp=4 "${TRAIN[@]}" --set output.dir="$WORK/ref" \
  > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "reference mpirun run failed"; }
python3 - "$WORK/local/metrics.jsonl" "$WORK/ref/metrics.jsonl" "$WORK/leo/metrics.jsonl" <<'PY' || fail "losses differ"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import finite, same_bits
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
loss = [[r["loss"] for r in run] for run in runs]
print("losses (slurm local, mpirun, slurm leonardo):", *loss, sep="\n  ")
assert all(finite(x) and x < 10 for x in loss[0]), "non-finite loss"
assert loss[0][-1] < loss[0][0], "loss did not fall"
def same(a, b): return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
assert same(loss[0], loss[1]), "Slurm job and mpirun disagree"
assert same(loss[2], loss[1]), "leonardo-shaped job and mpirun disagree"
PY
echo "PASS: local 2x2 and leonardo 1x4 jobs trained on Slurm, losses equal to mpirun"
