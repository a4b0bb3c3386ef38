# Shared by the script tests. CTest sets MT_BIN, MT_SRC, MT_MPIEXEC, MT_TMP.
set -euo pipefail
: "${MT_BIN:?run through ctest}"
# the test's own directory under MT_TMP, named by its area and script:
# cp/equivalence.sh and zero/equivalence.sh may run at once under ctest -j,
# and each starts by emptying its directory
MT_NAME=${MT_NAME:-$(basename "$(dirname "$0")")_$(basename "$0" .sh)}
WORK="$MT_TMP/$MT_NAME${MT_SUFFIX:+-$MT_SUFFIX}"
rm -rf "$WORK"
mkdir -p "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Open MPI's session directory, the test's own: two mpiruns starting at once
# under ctest -j raced on making the shared one in /tmp ("mkdir
# /tmp/ompi.HOST.UID: File exists", before the program ran). Short: its
# sockets' paths must stay within 108 bytes.
export OMPI_MCA_orte_tmpdir_base="/tmp/mto.$(printf '%s' "$WORK" | md5sum | cut -c1-10)"

# The tools that make a test's inputs (corpora, token files): the build's
# own, or where the sanitizer pass sets it (tests/run.sh) the release
# build's; an instrumented tool costs 1.5 s a start, and its inputs are
# not what the pass checks.
MT_INPUT_BIN=${MT_INPUT_BIN:-$MT_BIN}

# The suite's one time limit, a hang guard: "${MT_GUARD[@]}" CMD... (or
# mt_guard CMD...) runs CMD and kills it after MT_TIMEOUT seconds (exit 124,
# or 137 after the kill). No test's verdict depends on how long anything
# took: the limit is far above any command's time on a loaded 2-core
# machine, so only a hang reaches it.
MT_GUARD=(timeout --kill-after=10 "${MT_TIMEOUT:-300}")
mt_guard() { "${MT_GUARD[@]}" "$@"; }

# mt_mpirun NP PROGRAM ARGS...: launch under MPI, oversubscribed is fine
mt_mpirun() {
  local np=$1; shift
  mt_guard "$MT_MPIEXEC" --oversubscribe -n "$np" "$@"
}

# mt_test_program PROGRAM NP...: the test program $MT_TESTBIN/PROGRAM on
# each NP ranks in turn, its output printed (and in $WORK/PROGRAM.npN.log);
# one that fails fails the test
mt_test_program() {
  local prog=$1 np log; shift
  for np in "$@"; do
    log="$WORK/$prog.np$np.log"
    mt_mpirun "$np" "$MT_TESTBIN/$prog" > "$log" 2>&1 || { cat "$log"; fail "$prog on $np ranks"; }
    cat "$log"
  done
}

# mt_train NAME NP ARGS...: meshtrain ARGS on NP ranks, its output in
# $WORK/NAME.log; a run that fails prints that log and fails the test
mt_train() {
  local name=$1 np=$2; shift 2
  mt_mpirun "$np" "$MT_BIN/meshtrain" "$@" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; fail "run $name failed"; }
}

# mt_plan NAME ARGS...: meshtrain --plan-json for ARGS (no run): the plan in
# $WORK/NAME.plan.json, its text in $WORK/NAME.plan.txt
mt_plan() {
  local name=$1; shift
  "$MT_BIN/meshtrain" "$@" --plan-json "$WORK/$name.plan.json" > "$WORK/$name.plan.txt" \
    || fail "plan $name"
}

# mt_plan_and_train CASE ARGS...: CASE is "NAME NP SETTINGS" (the
# settings split on blanks): the plan (mt_plan), then the run on NP ranks
# (mt_train), of ARGS SETTINGS with output.dir $WORK/NAME
mt_plan_and_train() {
  local name np settings
  read -r name np settings <<< "$1"; shift
  # shellcheck disable=SC2086
  mt_plan "$name" "$@" $settings --set output.dir="$WORK/$name"
  # shellcheck disable=SC2086
  mt_train "$name" "$np" "$@" $settings --set output.dir="$WORK/$name"
}

# the default corpus, generated once per test directory
# mt_profile FILE NAME KEY=VALUE...: a hardware profile of the [cost] keys
# given (docs/planner.md, "Hardware profiles")
mt_profile() {
  local f=$1 name=$2 kv
  shift 2
  { printf '[hw]\nname = %s\n[cost]\n' "$name"
    for kv in "$@"; do printf '%s = %s\n' "${kv%%=*}" "${kv#*=}"; done; } > "$f"
}

mt_corpus() {
  local out="$WORK/corpus.txt"
  [ -f "$out" ] || "$MT_INPUT_BIN/meshdata" corpus "$out" --bytes "${1:-1000000}" >/dev/null
  echo "$out"
}

# mt_rank_pids DIR: the PIDs of the meshtrain ranks of the run with
# output.dir=DIR (the ranks, not the launcher)
mt_rank_pids() {
  pgrep -f "output.dir=$1" | while read -r p; do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = meshtrain ] && echo "$p"; done || true
}

# mt_signal_rank SIG DIR LAUNCHER [STEPS]: once DIR/metrics.jsonl has STEPS
# lines (3 by default; waited for as long as the LAUNCHER process lives, no
# guessed delay), SIG to one rank of that run: the others learn of it at the
# step boundary. A run meant to be signalled mid-way pauses after each step
# (MT_TEST_STEP_SLEEP_S) so it cannot end first on a fast machine.
mt_signal_rank() {
  local sig=$1 dir=$2 launcher=$3 want=${4:-3} pid
  while kill -0 "$launcher" 2>/dev/null; do
    [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l < "$dir/metrics.jsonl")" -ge "$want" ] && break
    sleep 0.1
  done
  pid=$(mt_rank_pids "$dir" | head -1)
  [ -n "$pid" ] || fail "no rank process of $dir found (the run ended too early?)"
  kill -"$sig" "$pid"
}

# mt_mpirun_each NP EXITS PROGRAM ARGS...: mt_mpirun, except that mpirun
# does not kill the other ranks when one exits non-zero: each must exit by
# itself (and in the ASan build runs its leak check first), and appends
# "CODE TIME" (its exit code, seconds since the epoch) to the file EXITS.
# Returns mpirun's status: 124 or 137 from the hang guard, else 0 (mpirun
# then says 0 whatever the ranks did: read EXITS).
mt_mpirun_each() {
  local np=$1 exits=$2; shift 2
  rm -f "$exits"
  env OMPI_MCA_orte_abort_on_non_zero_status=0 MT_EXITS="$exits" \
    "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe -n "$np" \
    sh -c '"$0" "$@"; rc=$?; echo "$rc $(date +%s.%N)" >> "$MT_EXITS"; exit $rc' "$@"
}
# mt_each_exited EXITS NP CODE: every one of the NP ranks exited with CODE
mt_each_exited() { [ "$(awk -v c="$3" '$1 == c' "$1" 2>/dev/null | wc -l)" -eq "$2" ]; }
# mt_each_failed EXITS NP: NP ranks exited, each non-zero and not by a signal
mt_each_failed() { awk -v np="$2" '$1 == 0 || $1 > 125 { bad = 1 } END { exit bad || NR != np }' "$1" 2>/dev/null; }
