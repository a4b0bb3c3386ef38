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

# the default corpus, generated once per test directory
mt_corpus() {
  local out="$WORK/corpus.txt"
  [ -f "$out" ] || "$MT_BIN/meshdata" corpus "$out" --bytes "${1:-1000000}" >/dev/null
  echo "$out"
}
