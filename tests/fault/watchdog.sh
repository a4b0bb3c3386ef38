# The watchdog (train.collective_timeout_s) and the flight recorder: a rank
# that stalls (the test hook MT_TEST_STALL=RANK:STEP:OP stops it forever
# before its first OP of step STEP) ends the job with exit 3 and one line
# that names the group, the call and the rank that did not arrive; every
# rank's record is in <output.dir>/flight, the other members of the group
# waiting in the same call. Once in a collective (dp = 4), once before a
# pipeline send (pp = 2): the stage after waits for it. The newest
# checkpoint then verifies, and the resumed run follows the loss curve of a
# run that never stalled; the records move aside to flight.1.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
base=(--set model.preset=tiny --set train.steps=6 --set train.global_batch=8
      --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=0
      --set train.collective_timeout_s=3 --set ckpt.every=2)

# stalled NAME NP STALL SETTINGS...: the run must end with exit 3
stalled() {
  local name=$1 np=$2 stall=$3 rc; shift 3
  set +e
  MT_TEST_STALL=$stall mt_mpirun "$np" "$MT_BIN/meshtrain" "${base[@]}" \
    --set output.dir="$WORK/$name" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 3 ] || { cat "$WORK/$name.log"; fail "$name: exit $rc, expected 3 (the watchdog)"; }
  grep 'watchdog:' "$WORK/$name.log"
}

# check_records NAME STALLED_RANK: the error line and the records agree
check_records() {
  python3 - "$WORK/$1" "$2" "$WORK/$1.log" <<'PY' || fail "$1: records"
import json, os, re, sys
run, stalled, log = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
lines = [l for l in log.splitlines() if "error: watchdog:" in l]
assert len(lines) == 1, "expected one watchdog line, got %d" % len(lines)
line = lines[0]
named = line.split("did not arrive:")[1].split(";")[0]
assert named.strip().startswith("rank %d (" % stalled) and ", rank" not in named, line
m = re.search(r"rank (\d+) waited [0-9.]+ s \(limit 3\.0 s\) in (.+?) on group (\S+)", line)
assert m, line
waiter, op, group = int(m.group(1)), m.group(2), m.group(3)
recs = {}
for f in os.listdir(os.path.join(run, "flight")):
    if f.startswith("rank_") and f.endswith(".json"):
        recs[int(f[5:-5])] = json.load(open(os.path.join(run, "flight", f)))
world = max(recs) + 1
assert sorted(recs) == list(range(world)), "records of ranks %s" % sorted(recs)
assert recs[waiter]["reason"] == "timeout" and recs[waiter]["open"]["group"] == group
assert recs[stalled]["open"] is None, "the stalled rank is in no call"
call = recs[waiter]["open"]["call"]
if call > 0:  # a collective: every other member waits in the same call
    w0, stride, size = recs[waiter]["open"]["ranks"]
    for q in range(size):
        r = w0 + q * stride
        if r == stalled:
            assert recs[r]["calls"].get(group, 0) < call, "the stalled rank began call %d" % call
            continue
        o = recs[r]["open"]
        assert o and o["group"] == group and o["call"] == call, "rank %d: %s" % (r, o)
for r, rec in recs.items():  # the ring: entries in order, each call ended before the next began
    ends = [o for o in rec["ops"] if o["end"] is not None]
    assert all(o["end"] >= o["start"] for o in ends), "rank %d: an entry ends before it starts" % r
print("%s: rank %d waited in %s on %s (call %d); rank %d did not arrive; %d records"
      % (os.path.basename(run), waiter, op, group, call, stalled, len(recs)))
PY
}

stalled dp 4 2:3:allreduce --set parallel.dp=4
check_records dp 2
# meshreport flight merges them: the same verdict, a row per rank
"$MT_BIN/meshreport" flight "$WORK/dp" --out "$WORK/dp-report" > "$WORK/dp-report.txt" \
  || { cat "$WORK/dp-report.txt"; fail "meshreport flight"; }
grep -E "^- allreduce on group dp_cp, call [0-9]+ .*did not arrive: rank 2 \(step 3, in no call" \
  "$WORK/dp-report.txt" || { cat "$WORK/dp-report.txt"; fail "meshreport flight: no verdict"; }
[ "$(tail -n +2 "$WORK/dp-report/flight.csv" | wc -l)" -eq 4 ] || fail "flight.csv: not 4 ranks"
stalled pp 4 0:3:send --set parallel.dp=2 --set parallel.pp=2
check_records pp 0
# the stage after rank 0 waits for its activations: a receive from rank 0
python3 - "$WORK/pp/flight/rank_2.json" <<'PY' || fail "pp: rank 2 does not wait for rank 0"
import json, sys
o = json.load(open(sys.argv[1]))["open"]
assert o and o["peer"] == 0 and "recv" in o["op"], o
PY

# the newest checkpoint (step 2) verifies; the resumed run trains steps 3-6
# as a run that never stalled does, and the records move aside
"$MT_BIN/meshckpt" verify "$WORK/dp/checkpoints/step_2" > /dev/null || fail "step_2 does not verify"
mt_train resumed 4 "${base[@]}" --set parallel.dp=4 --set output.dir="$WORK/dp" \
  --set train.resume=auto
mt_train straight 4 "${base[@]}" --set parallel.dp=4 --set output.dir="$WORK/straight"
[ -d "$WORK/dp/flight.1" ] && [ ! -e "$WORK/dp/flight" ] \
  || fail "the earlier records were not moved to flight.1"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/straight" "$WORK/dp" --bitwise \
  || fail "the resumed run left the loss curve"
echo "OK"
