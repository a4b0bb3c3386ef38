# meshreport on hand-made run directories with known numbers: speedup,
# efficiency (strong and weak), mean and spread over repeats, the step-time
# breakdown, bench rows, failed/missing/corrupt runs listed (not fatal), a run
# whose ranks outnumbered its node's cores flagged, steps.csv holding each
# point's losses (the data of loss.png and tokens_per_s.png), gnuplot PNGs,
# and one-line errors for bad input.
source "$(dirname "$0")/../scripts/common.sh"
R="$MT_BIN/meshreport"
python3 - "$WORK" <<'PY'
import json, os, sys
w = sys.argv[1]
def run(name, ranks, nodes, tps, step_s, mfu, parts=(0.06, 0.02, 0.01, 0.001, 0.0), repeat=0, summary=True,
        node_cpus=64):
    d = os.path.join(w, "c", "points", name); os.makedirs(d)
    json.dump({"id": name, "nodes": nodes, "ranks": ranks, "layout_name": "dp%d-tp1-pp1-cp1" % ranks,
               "repeat": repeat}, open(os.path.join(d, "point.json"), "w"))
    if not summary: return d
    # one attempt; ranks per node x 1 thread against the node's CPUs
    att = {"start_step": 0, "end_step": 3, "recorded": True, "layout": "dp%d-tp1-pp1-cp1" % ranks,
           "world": ranks, "node_ranks": ranks // nodes, "threads_per_rank": 1, "node_cpus": node_cpus}
    json.dump({"model": "tiny", "layout": {"world": ranks, "dp": ranks, "tp": 1, "pp": 1, "cp": 1},
               "tokens_per_s": tps, "tokens_per_s_per_rank": tps / ranks, "mean_step_s": step_s,
               "mfu": mfu, "final_loss": 4.0, "attempts": [att]}, open(os.path.join(d, "summary.json"), "w"))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        # step 1 is a slow warm-up the breakdown must skip; losses 5 - step/ranks, val at step 3
        f.write(json.dumps({"step": 1, "loss": 5 - 1 / ranks, "tokens_per_s": 100.0, "step_s": 9.0,
                            "time_s": dict(zip(["compute", "dp_comm", "optimizer", "data", "eval"],
                                               [8.0, 0.5, 0.3, 0.1, 0.0]))}) + "\n")
        for s in (2, 3):
            rec = {"step": s, "loss": 5 - s / ranks, "tokens_per_s": tps, "step_s": step_s,
                   "time_s": dict(zip(["compute", "dp_comm", "optimizer", "data", "eval"], parts))}
            if s == 3:
                rec["val_loss"] = 5.5 - s / ranks
            f.write(json.dumps(rec) + "\n")
    open(os.path.join(d, "status"), "w").write("done\n")
    return d
pts = []
pts.append(run("r1a", 1, 1, 1000.0, 0.100, 0.50, repeat=0))
pts.append(run("r1b", 1, 1, 1100.0, 0.100, 0.50, repeat=1))
pts.append(run("r2", 2, 1, 1800.0, 0.110, 0.45))
pts.append(run("r4", 4, 2, 3000.0, 0.125, 0.40, node_cpus=1))  # 2 ranks on a 1-CPU node
d = run("r8", 8, 4, 0, 0, 0, summary=False)
open(os.path.join(d, "status"), "w").write("failed: exit 3\n"); pts.append(d)
d = run("r16", 16, 8, 0, 0, 0, summary=False)
open(os.path.join(d, "summary.json"), "w").write("{not json"); pts.append(d)
# a bench run: allreduce at two sizes on 4 ranks
d = os.path.join(w, "c", "points", "bench4"); os.makedirs(d)
with open(os.path.join(d, "bench.jsonl"), "w") as f:
    for b, bw in ((1 << 20, 1.5), (1 << 24, 3.0)):
        f.write(json.dumps({"bench": "allreduce", "ranks": 4, "nodes": 2, "bytes": b, "time_us": 10.0,
                            "algbw_gbs": bw / 1.5, "busbw_gbs": bw, "wrong": 0}) + "\n")
pts.append(d)
points = [{"id": os.path.basename(p), "dir": os.path.relpath(p, os.path.join(w, "c"))} for p in pts]
points.append({"id": "never", "dir": "points/never", "nodes": 2, "ranks": 32, "layout_name": "dp32-tp1-pp1-cp1"})
for p in points:
    pj = os.path.join(w, "c", p["dir"], "point.json")
    if os.path.exists(pj): p.update(json.load(open(pj)))
json.dump({"name": "synthetic", "scaling": "strong", "points": points}, open(os.path.join(w, "c", "manifest.json"), "w"))
PY
"$R" "$WORK/c" > "$WORK/out.txt" 2> "$WORK/err.txt" || { cat "$WORK/out.txt" "$WORK/err.txt"; fail "meshreport failed on a campaign with failed points"; }
cat "$WORK/out.txt"
rep="$WORK/c/report"
for f in summary.csv runs.csv bench.csv report.md; do [ -s "$rep/$f" ] || fail "missing $f"; done
python3 - "$rep" <<'PY' || fail "report numbers wrong"
import csv, math, os, sys
rep = sys.argv[1]
rows = {int(r["ranks"]): r for r in csv.DictReader(open(os.path.join(rep, "summary.csv")))}
def close(a, b, what):
    a = float(a)
    assert math.isclose(a, b, rel_tol=1e-6), "%s: %r, expected %r" % (what, a, b)
t0 = 1050.0
close(rows[1]["tokens_per_s_mean"], t0, "mean of repeats")
close(rows[1]["tokens_per_s_std"], math.sqrt(((1000 - t0) ** 2 + (1100 - t0) ** 2) / 1), "sample std")
close(rows[1]["tokens_per_s_min"], 1000, "min"); close(rows[1]["tokens_per_s_max"], 1100, "max")
assert rows[1]["runs_ok"] == "2" and rows[1]["runs"] == "2"
close(rows[1]["speedup"], 1.0, "reference speedup")
close(rows[2]["speedup"], 1800 / t0, "speedup 2"); close(rows[2]["efficiency"], 1800 / t0 / 2, "efficiency 2")
close(rows[4]["speedup"], 3000 / t0, "speedup 4"); close(rows[4]["efficiency"], 3000 / t0 / 4, "efficiency 4")
close(rows[4]["tokens_per_s_per_rank"], 750, "tokens/s per rank")
close(rows[4]["mfu_mean"], 0.40, "mfu")
# breakdown: steps 2-3 only; other = step - components
close(rows[4]["compute_s"], 0.06, "compute"); close(rows[4]["dp_comm_s"], 0.02, "dp_comm")
close(rows[4]["other_s"], 0.125 - 0.091, "other")
assert rows[8]["runs_ok"] == "0" and rows[8]["speedup"] == "", "failed point has numbers"
assert 32 in rows and rows[32]["runs_ok"] == "0", "missing point not listed in summary.csv"
md = open(os.path.join(rep, "report.md")).read()
for needle in ("failed: exit 3", "summary.json unreadable", "missing: no run directory",
               "| 2 | 4 | dp4-tp1-pp1-cp1 | 1/1 | 3000.0 |", "allreduce | 2 | 4 | 3.000 | 16777216",
               "Reference: 1 rank on 1 node (dp1-tp1-pp1-cp1)", "| ranks > cores |",
               "## Ranks outnumbered cores", "- `r4` (4 ranks, dp4-tp1-pp1-cp1): 2 ranks x 1 thread on 1 CPU",
               "![loss](loss.png)"):
    assert needle in md, "report.md lacks %r" % needle
assert "- `r2`" not in md.split("## Ranks outnumbered cores")[1].split("##")[0], "r2 flagged"
# steps.csv: per point its first repeat's steps (r1a, not r1b), losses as in metrics.jsonl
steps = list(csv.DictReader(open(os.path.join(rep, "steps.csv"))))
runs_plotted = sorted({x["run"] for x in steps})
assert runs_plotted == ["r1a", "r2", "r4"], runs_plotted
assert len({x["series"] for x in steps}) == 3, "not one series per point"
for x in steps:
    ranks = int(x["layout"][2:].split("-")[0])
    assert math.isclose(float(x["loss"]), 5 - int(x["step"]) / ranks, rel_tol=1e-9), x
    assert (x["val_loss"] != "") == (x["step"] == "3"), x
    if x["val_loss"]:
        assert math.isclose(float(x["val_loss"]), 5.5 - 3 / ranks, rel_tol=1e-9), x
for png in ("speedup.png", "efficiency.png", "breakdown.png", "busbw.png", "loss.png", "tokens_per_s.png"):
    data = open(os.path.join(rep, png), "rb").read(8)
    assert data == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % png
print("strong-scaling numbers, breakdown, failures and plots OK")
PY
grep -q '| 1 | 1 | dp1-tp1-pp1-cp1 | 2/2 | 1050.0 | 70.7 |' "$WORK/out.txt" || fail "stdout lacks the Markdown table row"

# weak scaling over plain run directories: E = t0/t, S = E*N/N0
"$R" "$WORK"/c/points/r1a "$WORK"/c/points/r2 "$WORK"/c/points/r4 --scaling weak --out "$WORK/weak" > /dev/null ||
  fail "meshreport --scaling weak failed"
python3 - "$WORK/weak/summary.csv" <<'PY' || fail "weak-scaling numbers wrong"
import csv, math, sys
rows = {int(r["ranks"]): r for r in csv.DictReader(open(sys.argv[1]))}
assert math.isclose(float(rows[4]["efficiency"]), 0.100 / 0.125, rel_tol=1e-6), rows[4]["efficiency"]
assert math.isclose(float(rows[4]["speedup"]), 0.100 / 0.125 * 4, rel_tol=1e-6), rows[4]["speedup"]
print("weak-scaling numbers OK")
PY

# bad input: one line naming it, exit 2
set +e
"$R" "$WORK/c" --scaling sideways > /dev/null 2> "$WORK/e1"; rc1=$?
echo '{"points": 3' > "$WORK/badmanifest.json"; mkdir -p "$WORK/bad"; cp "$WORK/badmanifest.json" "$WORK/bad/manifest.json"
"$R" "$WORK/bad" > /dev/null 2> "$WORK/e2"; rc2=$?
"$R" "$WORK/c/points/r1a" > /dev/null 2> "$WORK/e3"; rc3=$?
set -e
[ $rc1 = 2 ] && grep -q "scaling: expected strong or weak, got 'sideways'" "$WORK/e1" || fail "bad --scaling: rc $rc1 $(cat "$WORK/e1")"
[ $rc2 = 2 ] && grep -q "bad/manifest.json: cannot read or parse" "$WORK/e2" || fail "bad manifest: rc $rc2 $(cat "$WORK/e2")"
[ $rc3 = 2 ] && grep -q -- "--out DIR is needed" "$WORK/e3" || fail "run dir without --out: rc $rc3 $(cat "$WORK/e3")"
echo "PASS: meshreport numbers, failures, plots and errors"
