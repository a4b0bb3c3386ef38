# meshslurm.py campaign --emulate without Slurm: each training point runs
# here on the virtual device (a given profile, h200), the points beyond
# --emulate-max-ranks are listed as skipped, and so are those this machine
# cannot start (meshtrain --check --ranks N says why), predicted.csv and each point's
# predicted/summary.json agree, and meshreport on the campaign (nothing
# measured yet) reports the predictions alone, as it does the points'
# predicted/ given directly. Bad input, one line and exit
# 2: --emulate with --dry-run, with a meshbench campaign, --emulate-steps 0.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
S="$MT_SRC/slurm/meshslurm.py"
sweep() { # NAME JOB
  cat > "$WORK/$1.ini" <<INI
[campaign]
name = $1
system = local
job = $2
ranks = 2, 4
layouts = dp-only; tp=2
steps = 4

[set]
model.preset = tiny
train.global_batch = 8
train.micro_batch = 2
data.train = $corpus
INI
  [ "$2" = train ] || sed -i '/^\[set\]/,$d' "$WORK/$1.ini"
}
sweep emu train
mt_guard python3 "$S" campaign "$WORK/emu.ini" --out "$WORK/camp" --bin "$MT_BIN" --emulate \
  --emulate-hw h200 --emulate-steps 2 --emulate-max-ranks 2 > "$WORK/emu.log" 2>&1 ||
  { cat "$WORK/emu.log"; fail "campaign --emulate"; }
cat "$WORK/emu.log"
python3 - "$WORK/camp" <<'PY' || fail "predicted results"
import csv, json, math, os, sys
camp = sys.argv[1]
rows = {r["point"]: r for r in csv.DictReader(open(os.path.join(camp, "predicted.csv")))}
assert len(rows) == 4, rows.keys()
for pid, r in rows.items():
    pred = os.path.join(camp, "points", pid, "predicted", "summary.json")
    if r["ranks"] == "4":
        assert r["status"] == "skipped: 4 ranks, more than --emulate-max-ranks 2", r
        assert not os.path.exists(pred), pred
        continue
    s = json.load(open(pred))
    assert r["status"] == "done" and s["virtual"]["hw"] == "h200" and s["steps"] == 2, r
    assert s["device"]["kind"] == "virtual" and s["virtual"]["causality_violations"] == 0, s["device"]
    assert math.isclose(float(r["tokens_per_s"]), s["tokens_per_s"], rel_tol=1e-5), (r, s["tokens_per_s"])
    assert s["layout"]["world"] == 2 and float(r["mem_gib"]) > 0
PY
# the report: predictions alone, the measured columns empty
mt_guard "$MT_BIN/meshreport" "$WORK/camp" > "$WORK/report.log" 2>&1 || { cat "$WORK/report.log"; fail "meshreport"; }
python3 - "$WORK/camp" <<'PY' || fail "meshreport's predicted columns"
import csv, json, math, os, sys
camp = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(camp, "report", "summary.csv"))))
assert len(rows) == 4
for r in rows:
    assert r["runs_ok"] == "0" and r["tokens_per_s_mean"] == "" and r["measured_over_predicted"] == ""
    pid = "n1-r%s-%s-rep0" % (r["ranks"], r["layout"])
    if r["ranks"] == "4":
        assert r["predicted_tokens_per_s"] == "", r
        continue
    s = json.load(open(os.path.join(camp, "points", pid, "predicted", "summary.json")))
    assert math.isclose(float(r["predicted_tokens_per_s"]), s["tokens_per_s"], rel_tol=1e-6), r
    assert math.isclose(float(r["predicted_step_s"]), s["mean_step_s"], rel_tol=1e-6), r
PY
if command -v gnuplot > /dev/null; then
  [ "$(head -c 4 "$WORK/camp/report/predicted.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "no predicted.png"
fi
# the emulated points' predicted/ reported directly: predictions (the
# virtual device's summary.json), not measured runs, no loss plot
mt_guard "$MT_BIN/meshreport" "$WORK"/camp/points/*/predicted --out "$WORK/direct" > "$WORK/direct.log" 2>&1 ||
  { cat "$WORK/direct.log"; fail "meshreport of the predicted directories"; }
python3 - "$WORK/direct" <<'PY' || fail "the predicted directories reported directly"
import csv, os, sys
runs = list(csv.DictReader(open(os.path.join(sys.argv[1], "runs.csv"))))
assert len(runs) == 2 and all(r["status"] == "predicted (virtual device as h200)" and r["ok"] == "0"
                              and r["nodes"] == "1" for r in runs), runs
rows = list(csv.DictReader(open(os.path.join(sys.argv[1], "summary.csv"))))
assert all(r["runs"] == "0" and float(r["predicted_tokens_per_s"]) > 0 for r in rows), rows
assert not os.path.exists(os.path.join(sys.argv[1], "loss.png"))
PY

# a point this machine cannot start is skipped with the reason (here the
# launcher's open files: 4 ranks need more than ulimit -n 78 allows), not
# launched; the 2-rank point still runs
sed -e 's/^name = emu/name = fit/' -e 's/^layouts = .*/layouts = tp=2/' "$WORK/emu.ini" > "$WORK/fit.ini"
(ulimit -n 78; mt_guard python3 "$S" campaign "$WORK/fit.ini" --out "$WORK/cfit" --bin "$MT_BIN" \
  --emulate --emulate-hw h200 --emulate-steps 1 > "$WORK/fit.log" 2>&1) ||
  { cat "$WORK/fit.log"; fail "campaign --emulate under ulimit -n 78"; }
cat "$WORK/fit.log"
python3 - "$WORK/cfit" <<'PY' || fail "a point that does not fit is skipped with the reason"
import csv, os, sys
rows = {r["ranks"]: r for r in csv.DictReader(open(os.path.join(sys.argv[1], "predicted.csv")))}
assert rows["2"]["status"] == "done", rows["2"]
st = rows["4"]["status"]
assert st.startswith("skipped: train.device = virtual: 4 ranks do not fit this machine: ") and \
    "ulimit -n 78" in st, st
assert not os.path.exists(os.path.join(sys.argv[1], "points", rows["4"]["point"], "predicted")), st
PY

bad() { # NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  set +e; mt_guard python3 "$S" campaign "$@" --bin "$MT_BIN" > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c . "$WORK/$name.err")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.err" ||
    { cat "$WORK/$name.out" "$WORK/$name.err"; fail "$name: rc $rc, want exit 2 and one line matching /$re/"; }
  echo "ok   $name: $(cat "$WORK/$name.err")"
}
bad dry_run "--emulate writes predicted results .*not with --dry-run" "$WORK/emu.ini" --out "$WORK/c2" --emulate --dry-run
sweep bench bench
bad bench "--emulate: campaign bench runs meshbench \(job = bench\)" "$WORK/bench.ini" --out "$WORK/c3" --emulate
bad steps "--emulate-steps 0: 1 or more" "$WORK/emu.ini" --out "$WORK/c4" --emulate --emulate-steps 0
echo PASS
