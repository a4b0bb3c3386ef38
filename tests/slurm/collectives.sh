# meshbench collectives under mpirun: every kind is correct (#wrong 0) at
# every size, busbw/algbw is the nccl-tests factor, the JSON lines carry the
# table, a mesh group is honoured, a corrupted result is caught (exit 3), and
# bad options give one error line (exit 2).
source "$(dirname "$0")/../scripts/common.sh"
B="$MT_BIN/meshbench"
mt_mpirun 3 "$B" collectives --min-bytes 4 --max-bytes 256K --factor 4 --iters 3 --warmup 1 \
  --json "$WORK/c.jsonl" > "$WORK/out.txt" 2>&1 || { cat "$WORK/out.txt"; fail "collectives failed"; }
cat "$WORK/out.txt"
python3 - "$WORK/c.jsonl" <<'PY' || fail "JSON lines wrong"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
factor = {"allreduce": 4 / 3, "allgather": 2 / 3, "reduce-scatter": 2 / 3, "alltoall": 2 / 3, "sendrecv": 1.0}
seen = {}
for r in rows:
    assert r["ranks"] == 3 and r["wrong"] == 0, r
    assert math.isclose(r["busbw_gbs"] / r["algbw_gbs"], factor[r["bench"]], rel_tol=1e-9), r
    assert math.isclose(r["algbw_gbs"], r["bytes"] / (r["time_us"] * 1e-6) * 1e-9, rel_tol=1e-9), r
    assert r["bytes"] == r["count"] * 4
    seen.setdefault(r["bench"], []).append(r["bytes"])
assert set(seen) == set(factor), seen
# 4 B .. 256 KiB in x4 steps: 10 sizes; the chunked kinds skip those below 3 floats
assert seen["allreduce"] == [4 ** k for k in range(1, 10)], seen["allreduce"]
assert seen["alltoall"][-1] == 262140, seen["alltoall"]  # rounded down to a multiple of 3 floats
print("JSON: %d rows, busbw factors and algbw OK" % len(rows))
PY
grep -q '^# allreduce: 0 wrong, avg busbw' "$WORK/out.txt" || fail "no summary line"

# a mesh group: tp pairs of a 4-rank world
mt_mpirun 4 "$B" allreduce --mesh tp=2 --group tp --sizes 1K,64K --iters 2 --json "$WORK/g.jsonl" > "$WORK/g.txt" 2>&1 ||
  { cat "$WORK/g.txt"; fail "allreduce over tp groups failed"; }
python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$WORK/g.jsonl')]
assert [r['bytes'] for r in rows] == [1024, 65536] and all(r['ranks'] == 2 and r['group'] == 'tp' and r['world'] == 4 for r in rows), rows
" || fail "tp group rows wrong"

# the check catches a wrong element
set +e
mt_mpirun 2 "$B" sendrecv --sizes 4K --iters 1 --fault > "$WORK/f.txt" 2>&1; rc=$?
set -e
[ "$rc" = 3 ] || { cat "$WORK/f.txt"; fail "corrupted result: exit $rc, expected 3"; }
grep -Eq '^ +4096 +1024 +float +none .* 1$' "$WORK/f.txt" || { cat "$WORK/f.txt"; fail "#wrong column does not show the corrupted element"; }

# bad input
expect_bad() {  # expect_bad REGEX ARGS...
  local re=$1; shift
  set +e; mt_mpirun 2 "$B" "$@" > "$WORK/o" 2> "$WORK/e"; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$WORK/o" "$WORK/e"; fail "'$*': exit $rc, expected 2"; }
  [ "$(grep -c 'meshbench: error' "$WORK/e")" = 1 ] || { cat "$WORK/e"; fail "'$*': not exactly one error line"; }
  grep -Eq -- "$re" "$WORK/e" || fail "'$*': '$(cat "$WORK/e")' does not match '$re'"
}
expect_bad "--max-bytes expects a size in bytes .* got '12Q'" allreduce --max-bytes 12Q
expect_bad "--group: unknown group 'ep'" allgather --group ep
expect_bad "--min-bytes 1048576 is larger than --max-bytes 1024" alltoall --min-bytes 1M --max-bytes 1K
expect_bad "--mesh: tp\*cp\*pp = 3 does not divide the 2 ranks" allreduce --mesh tp=3
echo "PASS: meshbench collectives"
