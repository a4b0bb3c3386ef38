# expect_fail.sh NAME NP REGEX [meshtrain args...]
# Bad input must give: a non-zero exit, within seconds, exactly one error
# line (from rank 0) that matches REGEX, and nothing written to output.dir.
MT_SUFFIX=$1; NP=$2; REGEX=$3; shift 3
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
out="$WORK/out"
mkdir -p "$out"; echo "earlier result" > "$out/metrics.jsonl"
args=()
for a in "$@"; do args+=("${a//@CORPUS@/$corpus}"); done
set +e
start=$(date +%s)
timeout --kill-after=5 60 "$MT_MPIEXEC" --oversubscribe -n "$NP" "$MT_BIN/meshtrain" \
  "${args[@]}" --set "output.dir=$out" > "$WORK/stdout" 2> "$WORK/stderr"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
cat "$WORK/stderr"
[ $rc -ne 0 ] || fail "exit code 0 for bad input"
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "timed out (hang) after ${elapsed}s"
[ $elapsed -le 30 ] || fail "took ${elapsed}s"
n=$(grep -c "^meshtrain: error:" "$WORK/stderr" || true)
[ "$n" -eq 1 ] || fail "expected exactly one error line, got $n"
grep "^meshtrain: error:" "$WORK/stderr" | grep -Eq -- "$REGEX" || fail "error line does not match /$REGEX/"
! grep -q "^\[rank" "$WORK/stderr" || fail "a rank printed a fatal message: bad input must be caught before any collective work"
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK/stderr" || fail "sanitizer report"
[ "$(cat "$out/metrics.jsonl")" = "earlier result" ] || fail "earlier output was damaged"
[ ! -f "$out/config.ini" ] || fail "config.ini written for a refused run"
echo "PASS: rc=$rc in ${elapsed}s: $(grep '^meshtrain: error:' "$WORK/stderr")"
