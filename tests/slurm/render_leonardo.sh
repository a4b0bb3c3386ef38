# leonardo-booster scripts for 1, 2, 16 and 128 nodes: QoS chosen by size and
# walltime, account, partition, 4 tasks and 4 GPUs per node, 8 CPUs per task,
# --exclusive, the signal/requeue machinery, the env file and srun binding;
# the campaign generator on the LEONARDO sweep (manifest, dry run); and the
# one-line errors for impossible requests. Needs no Slurm.
source "$(dirname "$0")/../scripts/common.sh"
GEN="python3 $MT_SRC/slurm/meshslurm.py"
check() {  # check FILE REGEX...: every regex matches some line
  local f=$1; shift
  for re in "$@"; do grep -Eq -- "$re" "$f" || { cat "$f"; fail "$f: no line matches '$re'"; }; done
}
while read -r nodes time qos; do
  d="$WORK/n$nodes"
  $GEN render train --system leonardo-booster --nodes "$nodes" --time "$time" --account AIP_test \
    --env NCCL_IB_SL=1 --set model.preset=gpt2-124m --run-dir "$d" > /dev/null || fail "render $nodes nodes"
  s="$d/job.sh"
  bash -n "$s" || fail "$s: bash syntax error"
  check "$s" "^#SBATCH --partition=boost_usr_prod$" "^#SBATCH --qos=$qos$" "^#SBATCH --account=AIP_test$" \
    "^#SBATCH --nodes=$nodes$" "^#SBATCH --ntasks-per-node=4$" "^#SBATCH --gpus-per-node=4$" \
    "^#SBATCH --cpus-per-task=8$" "^#SBATCH --exclusive$" "^#SBATCH --time=$time$" \
    "^#SBATCH --signal=B:USR1@[0-9]+$" "^#SBATCH --requeue$" "^#SBATCH --open-mode=append$" \
    "^#SBATCH --output=$d/slurm-%j.out$" "^source .*/slurm/leonardo/env.sh" \
    "^LAUNCH=\(srun --cpu-bind=cores\)$" "export SRUN_CPUS_PER_TASK=\\\$SLURM_CPUS_PER_TASK" \
    "^export NCCL_IB_SL=1$" "--set parallel.dp=$((nodes * 4))$" "--set metrics.hw=leonardo-booster" \
    "trap 'forward USR1' USR1" "scontrol requeue" "RESUME=\(--set train.resume=auto\)" \
    "^    75\)$"
  # directives must all come before the first command (sbatch stops reading there)
  awk '/^#SBATCH/ && seen {exit 1} !/^#/ && NF {seen=1}' "$s" || fail "$s: #SBATCH after a command"
  echo "ok: $nodes nodes, $time -> $qos"
done <<'T'
1 00:30:00 boost_qos_dbg
2 00:20:00 boost_qos_dbg
1 01:00:00 normal
16 02:00:00 normal
64 24:00:00 normal
128 04:00:00 boost_qos_bprod
T
# without the optional network variable nothing is exported
$GEN render train --system leonardo-booster --nodes 1 --account A --stdout > "$WORK/plain.sh"
grep -q 'NCCL_IB_SL=' "$WORK/plain.sh" && fail "NCCL_IB_SL exported although not asked for"
# bench and ckpt-convert jobs come from the same skeleton
$GEN render bench --system leonardo-booster --nodes 2 --account A --bench "allreduce --max-bytes 256M" --stdout > "$WORK/bench.sh"
check "$WORK/bench.sh" "meshbench\" allreduce --max-bytes 256M --json \"\\\$RUN_DIR/bench.jsonl\"" "^#SBATCH --qos=boost_qos_dbg$"
$GEN render ckpt-convert --system leonardo-booster --nodes 1 --account A --args "convert ckpt/latest out" --stdout > "$WORK/conv.sh"
check "$WORK/conv.sh" "meshckpt\" convert ckpt/latest out" "^#SBATCH --nodes=1$"
bash -n "$WORK/bench.sh" && bash -n "$WORK/conv.sh" || fail "bench/convert scripts: syntax"

# errors: one line naming the bad input, exit 2
expect_error() {  # expect_error REGEX ARGS...
  local re=$1; shift
  set +e; $GEN "$@" > /dev/null 2> "$WORK/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || fail "'$*' exited $rc, expected 2"
  [ "$(wc -l < "$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "'$*': not one error line"; }
  grep -Eq "$re" "$WORK/err" || fail "'$*': error '$(cat "$WORK/err")' does not match '$re'"
}
expect_error "requires --account" render train --system leonardo-booster --nodes 2 --stdout
expect_error "no QoS allows 300 nodes" render train --system leonardo-booster --nodes 300 --account A --stdout
expect_error "no QoS allows 100 nodes for 2-00:00:00.*pass --qos" render train --system leonardo-booster --nodes 100 --time 2-00:00:00 --account A --stdout
expect_error "system leonardo-booster has 3456 nodes; asked for 4000" render train --system leonardo-booster --nodes 4000 --account A --stdout
expect_error "tp\*pp\*cp = 3 does not divide 8 ranks" render train --system leonardo-booster --nodes 2 --account A --layout tp=3 --stdout
expect_error "system 'nosuch': no profile" render train --system nosuch --stdout
expect_error "time '1h' is not a Slurm time" render train --system local --time 1h --stdout
expect_error "set by the generator" render train --system local --set parallel.dp=3 --stdout

# the LEONARDO sweep: 8 sizes x 3 repeats, QoS by size, a chain and a report job
sweep="$MT_SRC/inputs/sweeps/gpt2-strong-leonardo.ini"
$GEN campaign "$sweep" --account AIP_test --dry-run > "$WORK/dry.txt" || fail "campaign --dry-run"
[ ! -e "$MT_SRC/outputs/campaigns/gpt2-strong-leonardo/manifest.json" ] || true
[ "$(grep -c '^  sbatch --parsable' "$WORK/dry.txt")" = 25 ] || { cat "$WORK/dry.txt"; fail "dry run: expected 24 points + report"; }
grep -q 'sbatch --parsable --dependency=afterany:<n1-r4-dp4-tp1-pp1-cp1-rep2> .*n2-r8-dp8-tp1-pp1-cp1-rep0/job.sh' "$WORK/dry.txt" || fail "dry run: no dependency chain"
$GEN campaign "$sweep" --account AIP_test --out "$WORK/camp" > /dev/null || fail "campaign"
python3 - "$WORK/camp/manifest.json" <<'PY' || fail "manifest"
import json, sys
m = json.load(open(sys.argv[1]))
pts = m["points"]
assert len(pts) == 24 and m["scaling"] == "strong"
want = {1: "boost_qos_dbg", 2: "boost_qos_dbg", 4: "normal", 64: "normal", 128: "boost_qos_bprod"}
for p in pts:
    if p["nodes"] in want:
        assert p["qos"] == want[p["nodes"]], p
    assert p["ranks"] == 4 * p["nodes"] and p["layout"]["dp"] == p["ranks"], p
print("manifest: 24 points, QoS by size OK")
PY
grep -q -- '--set train.global_batch=512' "$WORK/camp/points/n128-r512-dp512-tp1-pp1-cp1-rep0/job.sh" || fail "sweep [set] not in the job"
bash "$WORK/camp/submit.sh" --dry-run > "$WORK/dry2.txt" 2>&1 || fail "submit.sh --dry-run"
[ "$(grep -c '^sbatch --parsable' "$WORK/dry2.txt")" = 25 ] || { cat "$WORK/dry2.txt"; fail "submit.sh --dry-run: expected 25 sbatch lines"; }
grep -q '^sbatch --parsable --dependency=afterany:<n1-r4-dp4-tp1-pp1-cp1-rep0>:<n1-r4-dp4-tp1-pp1-cp1-rep1>:.*report.sh$' "$WORK/dry2.txt" || fail "report job does not wait for all points"
# weak scaling grows the global batch with the ranks
$GEN campaign "$MT_SRC/inputs/sweeps/gpt2-weak-leonardo.ini" --account A --out "$WORK/weak" > /dev/null || fail "weak campaign"
grep -q -- '--set train.global_batch=4096' "$WORK/weak/points/n128-r512-dp512-tp1-pp1-cp1-rep0/job.sh" || fail "weak: batch not scaled"
echo "PASS: leonardo-booster directives, campaign plan and errors"
