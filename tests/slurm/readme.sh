# Every command the docs show runs as written: the ```sh blocks of README.md,
# then of docs/*.md (file by file, each in order), in one shell, from a copy
# of the source tree (its own inputs/ and outputs/,
# slurm/ and apps/ linked, build/bin the build under test), with $WORK a
# directory of the test as a LEONARDO login shell has it. What runs how
# (tests/slurm/readme_commands.py): the local cluster and its jobs for real;
# render commands as written and, for LEONARDO ones, with --stdout for every
# system profile; LEONARDO jobs rendered, not run (a train job's outputs
# stood in by a 2-step tiny run); meshtrain training commands checked as
# written, then run on a tiny model for 3 steps; meshckpt, meshplan and
# meshreport as written; the build, the suite and minutes-long benchmarks
# skipped with the reason, and so is a block marked `<!-- not run: REASON -->`
# (what CI lacks: a GPU, a real cluster). Ends with the count of each, every
# command skipped and why, and every failure.
source "$(dirname "$0")/../scripts/common.sh"
# a short path: the local cluster's sockets live under its directory
T=$(mktemp -d /tmp/mt-readme.XXXXXX)
ln -s "$T" "$WORK/tree"
cleanup() {
  python3 "$T/slurm/meshslurm.py" cluster stop > /dev/null 2>&1 || true
  if [ "${KEEP:-0}" = 0 ]; then rm -rf "$T"; fi
}
trap cleanup EXIT
ln -s "$MT_SRC/slurm" "$MT_SRC/apps" "$T/"
mkdir -p "$T/build" "$T/outputs"
ln -s "$MT_BIN" "$T/build/bin"
# inputs/ of its own (commands write the corpus and sweeps into it)
(cd "$MT_SRC" && find inputs -type f ! -path 'inputs/data/*.txt' ! -path 'inputs/data/*.bin' -print0 |
  xargs -0 cp --parents -t "$T")
DOCS=(README.md)
for f in "$MT_SRC"/docs/*.md; do DOCS+=("docs/$(basename "$f")"); done
[ "${#DOCS[@]}" -gt 1 ] || fail "no docs/*.md pages found"
HERE=$(cd "$(dirname "$0")" && pwd)
(cd "$MT_SRC" && python3 "$HERE/readme_commands.py" "${DOCS[@]}") > "$WORK/commands.sh" ||
  fail "cannot read the commands of the docs (readme_commands.py above says why)"
NODEV=0
"$MT_BIN/meshbench" devices | grep -q "^cuda_built 0" && NODEV=1

cat > "$WORK/prelude.sh" <<'EOF'
set -u
cd "$T"
# a LEONARDO login shell's $WORK; no cluster of the caller's
export WORK="$T/leo-work"
mkdir -p "$WORK"
unset SLURM_CONF SLURM_JOB_ID SLURM_JOBID SLURM_NODELIST SLURM_JOB_NODELIST SLURM_NTASKS
# as the README says for root and for more ranks than cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
NOSLURM=0 N_RUN=0 N_SKIP=0 N_RENDERED=0 N_FAIL=0 N_NOSLURM=0 CUR=""
FAILED=() SKIPPED=()
# a build without CUDA refuses the LEONARDO profile's device = cuda when it
# checks a job: there its device keys are taken off (render_leonardo does too)
extra() { case "$1" in *"meshslurm.py render "*|*"meshslurm.py campaign "*)
  [ "$NODEV" = 1 ] && echo " --profile-set device= --profile-set precision=" ;; esac; }
begin() { CUR="$1 ($2): $3"; echo; echo "== $1 [$2] \$ $3"; }
run() {  # run WHERE CMD: in this shell (an export carries on); WHERE is FILE:LINE
  local log="$LOGS/${1//\//_}.$RANDOM.log" rc=0 cmd="$2$(extra "$2")" t0=$SECONDS
  eval "$cmd" > "$log" 2>&1 < /dev/null || rc=$?
  tail -4 "$log" | sed 's/^/   | /'
  echo "   ($((SECONDS - t0)) s)"
  N_RUN=$((N_RUN + 1))
  if [ "$rc" = 77 ] && [[ "$cmd" == *"cluster start"* ]]; then
    NOSLURM=1; echo "   (no local cluster here: $(tail -1 "$log"))"; return 0
  fi
  if [ "$rc" != 0 ]; then
    N_FAIL=$((N_FAIL + 1)); FAILED+=("$1: $cmd (exit $rc)")
    echo "   FAILED (exit $rc); its output:"; sed 's/^/   ! /' "$log" | tail -25
  fi
}
skip() { N_SKIP=$((N_SKIP + 1)); SKIPPED+=("$1: $2"); echo "   skipped: $2"; }
skip_noslurm() { N_NOSLURM=$((N_NOSLURM + 1)); echo "   skipped: no local cluster here"; }
standin() { echo "   stand-in: $2"; run "$1" "$2"; }
# render_everywhere LINE CMD: a LEONARDO render, with --stdout for every profile
render_everywhere() {
  [[ "$2" == *"--system leonardo-booster"* ]] || return 0
  local s
  for s in slurm/systems/*.ini; do
    s=$(basename "$s" .ini)
    echo "   render for $s with --stdout:"
    run "$1" "$(sed "s/--system leonardo-booster/--system $s/" <<< "$2") --stdout > /dev/null"
  done
}
# maybe_leonardo LINE CMD TARGET: a LEONARDO job (or campaign) is rendered,
# not run; a train job's outputs are stood in by a tiny run
maybe_leonardo() {
  local line=$1 cmd=$2 target=$3 dir
  dir=$(dirname "$target")
  if grep -qs "for system 'leonardo-booster'" "$target" ||
     grep -qs '"system": "leonardo-booster"' "$dir/manifest.json"; then
    N_RENDERED=$((N_RENDERED + 1))
    echo "   rendered, not run: a LEONARDO job ($target)"
    if grep -qs "^# meshtrain train job" "$target"; then
      standin "$line" "mpirun -n 1 build/bin/meshtrain --set model.preset=tiny --set train.steps=2 --set train.global_batch=4 --set train.micro_batch=2 --set parallel.dp=1 --set data.train=inputs/data/corpus.txt --set output.dir=$dir"
    fi
  else
    run "$line" "$cmd"
  fi
}
# wait_queue LINE: until this cluster's queue is empty (a report job's output)
wait_queue() {
  local i
  for i in $(seq 1 600); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 1
  done
  echo "   the queue did not empty in 600 s"
}
finish() {
  echo
  echo "Doc commands: $N_RUN runs as written (checks and tiny runs included), $N_RENDERED LEONARDO" \
    "jobs rendered and not run, $N_SKIP skipped, $N_FAIL failed"
  local s
  for s in "${SKIPPED[@]}"; do echo "  skipped $s"; done
  for s in "${FAILED[@]}"; do echo "  FAILED $s"; done
  if [ "$N_FAIL" != 0 ]; then exit 1; fi
  if [ "$N_NOSLURM" != 0 ]; then echo "SKIP: $N_NOSLURM commands need the local cluster, which cannot run here"; exit 77; fi
  echo "PASS: every command of README.md and docs/*.md that applies here runs as written"
  exit 0
}
EOF
mkdir -p "$WORK/logs"
rc=0
T="$T" NODEV="$NODEV" LOGS="$WORK/logs" bash -c 'source "$0"; source "$1"' "$WORK/prelude.sh" "$WORK/commands.sh" || rc=$?
[ "$rc" = 0 ] || KEEP=1
[ "$rc" = 77 ] && exit 77
[ "$rc" = 0 ] || fail "commands of the docs failed (tree kept in $T)"
