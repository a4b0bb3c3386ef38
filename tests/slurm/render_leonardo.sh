# leonardo-booster scripts for 1, 2, 3, 16, 64 and 128 nodes: QoS chosen by
# size and walltime (boost_qos_lprod only up to 3 nodes), account, partition,
# 4 tasks and 4 GPUs per node, 8 CPUs per task, --mem=494000, --exclusive
# except under boost_qos_dbg, every module of the profile, TMPDIR on the
# scratch file system, run directory, checkpoints and data under $WORK
# (output_root, data_root: a data file missing there is refused),
# the signal/requeue machinery, the env file and srun binding; the campaign
# generator on the LEONARDO sweep (manifest, dry run, report job on
# lrd_all_serial, the compiler module only); the one-line errors for
# impossible requests; and a job whose module does not load (a stub `module`
# command) failing at once, naming it; cmake (a build module) loaded by
# env.sh on a login node, never by a job.
# Needs no Slurm.
source "$(dirname "$0")/../scripts/common.sh"
GEN="python3 $MT_SRC/slurm/meshslurm.py"
check() {  # check FILE REGEX...: every regex matches some line
  local f=$1; shift
  for re in "$@"; do grep -Eq -- "$re" "$f" || { cat "$f"; fail "$f: no line matches '$re'"; }; done
}
# LEONARDO's file systems, as a login node sets them
export WORK="$WORK/leo-work" CINECA_SCRATCH="$WORK/leo-scratch"
mkdir -p "$WORK" "$CINECA_SCRATCH"
# the run modules (every job loads them; cmake is a build module)
MODULES=(gcc/12.2.0 cuda/12.2 openmpi/4.1.6--gcc--12.2.0-cuda-12.2
  nccl/2.22.3-1--gcc--12.2.0-cuda-12.2-spack0.22 hdf5/1.14.3--openmpi--4.1.6--gcc--12.2.0-spack0.22
  openblas/0.3.26--gcc--12.2.0)
# the default configuration's data (inputs/data/corpus.txt) is looked for
# under data_root, $WORK/meshtrain: refused while it is missing
data="$WORK/meshtrain/inputs/data/corpus.txt"
set +e; $GEN render train --system leonardo-booster --nodes 1 --account A --bin "$MT_BIN" --stdout \
  --set model.preset=gpt2-124m --set train.global_batch=32 --set train.micro_batch=2 \
  --profile-set device= --profile-set precision= > /dev/null 2> "$WORK/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "^meshslurm: error: job not written: data.train = $data: no such file" "$WORK/err" ||
  fail "missing data under \$WORK: rc $rc '$(cat "$WORK/err")'"
mkdir -p "$(dirname "$data")"
"$MT_BIN/meshdata" corpus "$data" --bytes 100K > /dev/null
# a batch every size divides (meshtrain --check runs on each job)
BATCH=(--set model.preset=gpt2-124m --set train.global_batch=3072 --set train.micro_batch=2)
# the profile's jobs train on the GPUs (train.device=cuda, bf16); a build
# without CUDA refuses that at render time (meshtrain --check), so there the
# device keys are taken off the profile and not checked
DEVICE_CHECKS=("--set train.device=cuda$" "--set train.precision=bf16$")
NODEV=()
if "$MT_BIN/meshbench" devices | grep -q "^cuda_built 0"; then
  NODEV=(--profile-set device= --profile-set precision=)
  BATCH+=("${NODEV[@]}")
  DEVICE_CHECKS=()
fi
while read -r nodes time qos exclusive; do
  # no --run-dir: the profile's output_root ($WORK/meshtrain) decides
  $GEN render train --system leonardo-booster --nodes "$nodes" --time "$time" --account AIP_test \
    --env NCCL_IB_SL=1 "${BATCH[@]}" --bin "$MT_BIN" --name "n$nodes" > "$WORK/rendered" ||
    fail "render $nodes nodes"
  s=$(cat "$WORK/rendered"); d=$(dirname "$s")
  case "$d" in "$WORK/meshtrain/runs/"*) ;; *) fail "$nodes nodes: run directory $d is not under \$WORK/meshtrain/runs";; esac
  case "$d" in "$MT_SRC/outputs"/*) fail "$nodes nodes: run directory $d is in the source tree's outputs/";; esac
  bash -n "$s" || fail "$s: bash syntax error"
  check "$s" "^#SBATCH --partition=boost_usr_prod$" "^#SBATCH --qos=$qos$" "^#SBATCH --account=AIP_test$" \
    "^#SBATCH --nodes=$nodes$" "^#SBATCH --ntasks-per-node=4$" "^#SBATCH --gpus-per-node=4$" \
    "^#SBATCH --cpus-per-task=8$" "^#SBATCH --mem=494000$" "^#SBATCH --time=$time$" \
    "^#SBATCH --signal=B:USR1@[0-9]+$" "^#SBATCH --requeue$" "^#SBATCH --open-mode=append$" \
    "^#SBATCH --output=$d/slurm-%j.out$" "^RUN_DIR=$d$" "--set output.dir=$d$" \
    "^source .*/slurm/leonardo/env.sh" \
    "^export TMPDIR=\"\\\$CINECA_SCRATCH/tmp/meshtrain-\\\$\{SLURM_JOB_ID:-\\\$\\\$\}\"$" \
    "^LAUNCH=\(srun --cpu-bind=cores\)$" "export SRUN_CPUS_PER_TASK=\\\$SLURM_CPUS_PER_TASK" \
    "since Slurm 22.05" "^export NCCL_IB_SL=1$" "--set parallel.dp=$((nodes * 4))$" \
    "--set metrics.hw=leonardo-booster" "trap on_usr1 USR1" "scontrol requeue" \
    "RESUME=\(--set train.resume=auto\)" "^    75\)$" "^if ! mt_load_modules " \
    "^export NCCL_IB_HCA=mlx5$" "--set data.train=$data$" "${DEVICE_CHECKS[@]}"
  # every module of the profile, in its order
  [ "$(grep '^MODULES=' "$s")" = "MODULES=(${MODULES[*]})" ] || fail "$s: modules are '$(grep '^MODULES=' "$s")'"
  if [ "$exclusive" = yes ]; then
    check "$s" "^#SBATCH --exclusive$"
  else
    grep -q -- "--exclusive" <(grep '^#SBATCH' "$s") && fail "$s: --exclusive with $qos"
    check "$s" "^# No --exclusive: QoS $qos cannot be combined with it"
  fi
  # directives must all come before the first command (sbatch stops reading there)
  awk '/^#SBATCH/ && seen {exit 1} !/^#/ && NF {seen=1}' "$s" || fail "$s: #SBATCH after a command"
  echo "ok: $nodes nodes, $time -> $qos, exclusive $exclusive, in $d"
done <<'T'
1 00:30:00 boost_qos_dbg no
2 00:20:00 boost_qos_dbg no
1 01:00:00 normal yes
3 3-00:00:00 boost_qos_lprod yes
16 02:00:00 normal yes
64 24:00:00 normal yes
128 04:00:00 boost_qos_bprod yes
T
# the checkpoints of such a run go under its run directory
grep -q "^#SBATCH --output=$WORK/meshtrain/runs/" "$(cat "$WORK/rendered")" || fail "128 nodes: output not under \$WORK"
# $FAST instead, per render; an output root whose variable is unset is refused
FAST="$WORK/fast" $GEN render train --system leonardo-booster --nodes 1 --account A "${BATCH[@]}" --bin "$MT_BIN" \
  --profile-set 'output_root=$FAST/mt' --stdout | grep -q "^RUN_DIR=$WORK/fast/mt/runs/" || fail "output_root=\$FAST/mt not used"
# module names per render
$GEN render train --system leonardo-booster --nodes 1 --account A "${BATCH[@]}" --bin "$MT_BIN" --stdout \
  --profile-set modules.hdf5=hdf5/1.14.5 --profile-set modules.cmake= > "$WORK/mods.sh"
grep -q '^MODULES=(gcc/12.2.0 .* hdf5/1.14.5 openblas/0.3.26--gcc--12.2.0)$' "$WORK/mods.sh" || fail "modules.NAME overrides: $(grep '^MODULES=' "$WORK/mods.sh")"
# without the optional network variable nothing is exported
$GEN render train --system leonardo-booster --nodes 1 --account A --stdout "${BATCH[@]}" --bin "$MT_BIN" > "$WORK/plain.sh"
grep -q 'NCCL_IB_SL=' "$WORK/plain.sh" && fail "NCCL_IB_SL exported although not asked for"
# bench and ckpt-convert jobs come from the same skeleton
$GEN render bench --system leonardo-booster --nodes 2 --account A --bench "allreduce --max-bytes 256M" --stdout > "$WORK/bench.sh"
check "$WORK/bench.sh" "meshbench\" allreduce --max-bytes 256M --json \"\\\$RUN_DIR/bench.jsonl\"" "^#SBATCH --qos=boost_qos_dbg$"
# (no checkpoint here: --no-check; tests/slurm/submit_check.sh checks ckpt-convert jobs)
$GEN render ckpt-convert --system leonardo-booster --nodes 1 --account A --args "convert ckpt/latest out" --stdout \
  --no-check > "$WORK/conv.sh"
check "$WORK/conv.sh" "meshckpt\" convert ckpt/latest out" "^#SBATCH --nodes=1$"
bash -n "$WORK/bench.sh" && bash -n "$WORK/conv.sh" || fail "bench/convert scripts: syntax"

# errors: one line naming the bad input, exit 2
expect_error() {  # expect_error REGEX ARGS...
  local re=$1; shift
  set +e; $GEN "$@" > /dev/null 2> "$WORK/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$WORK/err"; fail "'$*' exited $rc, expected 2"; }
  [ "$(wc -l < "$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "'$*': not one error line"; }
  grep -Eq "$re" "$WORK/err" || fail "'$*': error '$(cat "$WORK/err")' does not match '$re'"
}
L=(render train --system leonardo-booster --bin "$MT_BIN" --stdout)
expect_error "requires --account" "${L[@]}" --nodes 2
expect_error "no QoS allows 300 nodes" "${L[@]}" --nodes 300 --account A
expect_error "no QoS allows 100 nodes for 2-00:00:00.*pass --qos" "${L[@]}" --nodes 100 --time 2-00:00:00 --account A
expect_error "QoS boost_qos_lprod allows 1-3 nodes and at most 4-00:00:00; the job asks for 4 nodes" \
  "${L[@]}" --nodes 4 --time 2-00:00:00 --qos boost_qos_lprod --account A
expect_error "QoS boost_qos_dbg allows 1-2 nodes and at most 00:30:00; the job asks for 1 node for 01:00:00" \
  "${L[@]}" --nodes 1 --time 01:00:00 --qos boost_qos_dbg --account A
expect_error "system leonardo-booster has 3456 nodes; asked for 4000" "${L[@]}" --nodes 4000 --account A
expect_error "tp\*pp\*cp = 3 does not divide 8 ranks" "${L[@]}" --nodes 2 --account A --layout tp=3
expect_error "system 'nosuch': no profile" render train --system nosuch --stdout
expect_error "time '1h' is not a Slurm time" render train --system local --time 1h --stdout
expect_error "set by the generator" render train --system local --set parallel.dp=3 --stdout
set +e; env -u WORK $GEN "${L[@]}" --nodes 1 --account A > /dev/null 2> "$WORK/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q 'output_root = \$WORK/meshtrain, but \$WORK is not set here' "$WORK/err" ||
  fail "unset \$WORK: rc $rc, '$(cat "$WORK/err")'"
expect_error "\[modules\] hdf5 = 'bad name': not a module name" "${L[@]}" --nodes 1 --account A --profile-set 'modules.hdf5=bad name'

# the LEONARDO sweep: 8 sizes x 3 repeats, QoS by size, a chain and a report job
sweep="$MT_SRC/inputs/sweeps/gpt2-strong-leonardo.ini"
$GEN campaign "$sweep" --account AIP_test --bin "$MT_BIN" --dry-run "${NODEV[@]}" > "$WORK/dry.txt" || fail "campaign --dry-run"
[ "$(grep -c '^  sbatch --parsable' "$WORK/dry.txt")" = 25 ] || { cat "$WORK/dry.txt"; fail "dry run: expected 24 points + report"; }
grep -q 'sbatch --parsable --dependency=afterany:<n1-r4-dp4-tp1-pp1-cp1-rep2> .*n2-r8-dp8-tp1-pp1-cp1-rep0/job.sh' "$WORK/dry.txt" || fail "dry run: no dependency chain"
grep -q "into $WORK/meshtrain/campaigns/gpt2-strong-leonardo$" "$WORK/dry.txt" || fail "campaign not under \$WORK by default"
grep -q "meshtrain --check: 8 distinct configurations OK (and their data files)" "$WORK/dry.txt" || fail "campaign did not check each configuration once"
$GEN campaign "$sweep" --account AIP_test --bin "$MT_BIN" --out "$WORK/camp" "${NODEV[@]}" > /dev/null || fail "campaign"
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
# the report job: the serial partition, no QoS, no GPU, no --exclusive or --mem, one task
r="$WORK/camp/report.sh"
check "$r" "^#SBATCH --partition=lrd_all_serial$" "^#SBATCH --ntasks-per-node=1$" "^#SBATCH --account=AIP_test$" \
  "meshreport\" \"\\\$CAMPAIGN\" --out" "^MODULES=\(gcc/12.2.0\)$"
grep -Eq '^#SBATCH --(qos|gpus|exclusive|mem|requeue)' "$r" && { grep '^#SBATCH' "$r"; fail "$r: QoS, GPU, exclusive, mem or requeue on the report job"; }
grep -q 'cat .*report.md' "$r" && fail "$r: the report job prints the table twice"
bash "$WORK/camp/submit.sh" --dry-run > "$WORK/dry2.txt" 2>&1 || fail "submit.sh --dry-run"
[ "$(grep -c '^sbatch --parsable' "$WORK/dry2.txt")" = 25 ] || { cat "$WORK/dry2.txt"; fail "submit.sh --dry-run: expected 25 sbatch lines"; }
grep -q '^sbatch --parsable --dependency=afterany:<n1-r4-dp4-tp1-pp1-cp1-rep0>:<n1-r4-dp4-tp1-pp1-cp1-rep1>:.*report.sh$' "$WORK/dry2.txt" || fail "report job does not wait for all points"
# weak scaling grows the global batch with the ranks
$GEN campaign "$MT_SRC/inputs/sweeps/gpt2-weak-leonardo.ini" --account A --bin "$MT_BIN" "${NODEV[@]}" --out "$WORK/weak" > /dev/null || fail "weak campaign"
grep -q -- '--set train.global_batch=4096' "$WORK/weak/points/n128-r512-dp512-tp1-pp1-cp1-rep0/job.sh" || fail "weak: batch not scaled"

# ---- modules in the job, with a stub `module` command (Environment Modules'
# behaviour: a module it cannot find is an error, exit 1; MODULE_LIES=1: exit 0
# anyway, as old versions do) exported to the job like a login shell's
module() {
  local cmd=$1 m full; shift
  case "$cmd" in
    purge) export LOADEDMODULES=""; echo "purge" >> "$MODULE_LOG" ;;
    load)
      for m in "$@"; do
        full=$(grep -m1 -x -e "$m" -e "$m/.*" "$MODULE_AVAIL" || true)
        if [ -z "$full" ]; then
          echo "ERROR: Unable to locate a modulefile for '$m'" >&2
          [ -n "${MODULE_LIES:-}" ] && return 0
          return 1
        fi
        export LOADEDMODULES=${LOADEDMODULES:+$LOADEDMODULES:}$full
        echo "load $m" >> "$MODULE_LOG"
      done ;;
  esac
}
export -f module
export MODULE_AVAIL="$WORK/module-avail" MODULE_LOG="$WORK/module.log"
# a job the stub can run: the stand-in meshtrain, launched without srun
$GEN render train --system leonardo-booster --nodes 1 --account A --bin "$MT_SRC/tests/slurm/fake_bin" \
  --profile-set launcher=env --run-dir "$WORK/modjob" --set train.steps=2 > /dev/null || fail "render the module job"
run_job() {  # run_job NAME: the job script run by bash, as sbatch would start it
  rm -rf "$WORK/modjob/metrics.jsonl" "$WORK/modjob/status" "$MODULE_LOG"
  local t0=$SECONDS rc=0
  (cd "$WORK" && env -u SLURM_JOB_ID bash "$WORK/modjob/job.sh") > "$WORK/$1.out" 2>&1 || rc=$?
  echo "$1: exit $rc after $((SECONDS - t0)) s"
  JOB_RC=$rc
}
{ printf '%s\n' "${MODULES[@]}" | grep -v '^cmake$'; echo cmake/3.27.9; } > "$MODULE_AVAIL"
run_job all-modules
[ "$JOB_RC" = 0 ] || { cat "$WORK/all-modules.out"; fail "job with every module available exited $JOB_RC"; }
[ "$(cat "$WORK/modjob/status")" = done ] || fail "status '$(cat "$WORK/modjob/status")'"
[ "$(grep -c '^load ' "$MODULE_LOG")" = 6 ] && head -1 "$MODULE_LOG" | grep -q purge || { cat "$MODULE_LOG"; fail "not purge + 6 loads"; }
grep -q '^load cmake' "$MODULE_LOG" && fail "the job loaded the build module cmake"
[ "$(wc -l < "$WORK/modjob/metrics.jsonl")" = 2 ] || fail "the application did not run after the modules loaded"
tmp=$(sed -n 's/.* tmpdir=\([^ ]*\) .*/\1/p' "$WORK/modjob/slurm-env.txt" | tail -1)
case "$tmp" in "$CINECA_SCRATCH/tmp/meshtrain-"*) ;; *) fail "the job's TMPDIR was '$tmp', not under \$CINECA_SCRATCH/tmp";; esac
[ ! -e "$tmp" ] || fail "the job's TMPDIR $tmp was not removed at its end"
for lies in "" 1; do
  grep -v '^nccl/' "$MODULE_AVAIL" > "$MODULE_AVAIL.x" && mv "$MODULE_AVAIL.x" "$MODULE_AVAIL"
  MODULE_LIES=$lies run_job "no-nccl$lies"
  nccl=nccl/2.22.3-1--gcc--12.2.0-cuda-12.2-spack0.22
  [ "$JOB_RC" = 3 ] || { cat "$WORK/no-nccl$lies.out"; fail "a missing module: job exited $JOB_RC, expected 3"; }
  grep -q "module $nccl did not load: check \`module avail\` and \[modules\] in slurm/systems/leonardo-booster.ini" \
    "$WORK/no-nccl$lies.out" || { cat "$WORK/no-nccl$lies.out"; fail "the job's log does not name the module"; }
  [ "$(cat "$WORK/modjob/status")" = "failed: module $nccl did not load" ] || fail "status '$(cat "$WORK/modjob/status")'"
  [ ! -e "$WORK/modjob/metrics.jsonl" ] || fail "the application ran although a module did not load"
  grep -q '^load hdf5' "$MODULE_LOG" && fail "modules after the failed one were loaded"
done
# by hand on a login node: source slurm/leonardo/env.sh loads them, or says which failed
( unset MT_MODULES_LOADED; source "$MT_SRC/slurm/leonardo/env.sh" ) 2> "$WORK/env.err" &&
  fail "source env.sh succeeded without the nccl module"
grep -q "module $nccl did not load" "$WORK/env.err" || fail "env.sh: '$(cat "$WORK/env.err")'"
printf '%s\n' "$nccl" >> "$MODULE_AVAIL"
( unset MT_MODULES_LOADED; source "$MT_SRC/slurm/leonardo/env.sh" && echo "$LOADEDMODULES" ) > "$WORK/env.out" ||
  fail "source env.sh failed with every module available"
grep -q "^gcc/12.2.0:.*:$nccl:.*:cmake/3.27.9$" "$WORK/env.out" || fail "env.sh loaded '$(cat "$WORK/env.out")'"
echo "PASS: leonardo-booster directives, modules, memory, TMPDIR, output root, campaign plan and errors"
