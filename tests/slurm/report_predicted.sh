# meshreport on predictions (issue 44 item 5), hand-made like report.sh (no
# MPI): a campaign of 1, 2 and 4 LEONARDO-like nodes (4 devices a node)
# emulated, nothing run yet, each point's predicted/ as campaign --emulate
# writes it (the virtual device's summary.json, losses of 0):
#   1. the campaign's report gives the predictions, labelled, per point with
#      its node count, predicted speedup, efficiency and MFU; stdout too;
#      predicted.png's ranges hold every point, the largest included, and
#      room above its bar; speedup.png and efficiency.png show the
#      predictions;
#   2. the predicted directories reported directly: predictions, not
#      measured runs, their nodes the points' (or, with no point.json, the
#      profile's devices_per_node's), no loss plot and a line saying why;
#   3. once two points have run: measured and predicted side by side (the
#      table, the Predicted section, summary.csv, speedup.png,
#      predicted.png); a run and its predicted/ given directly are one point.
source "$(dirname "$0")/../scripts/common.sh"
R="$MT_BIN/meshreport"
LONG="auto:dp16-tp1-pp1-cp1-zero1-mb1-sp0-recompute0-schedule1f1b-v1"
python3 - "$WORK" "$LONG" <<'PY'
import json, os, sys
w, long_layout = sys.argv[1], sys.argv[2]
points = []
# (nodes, ranks, predicted tokens/s): the largest point is the fastest
for nodes, ranks, tps in ((1, 4, 1000.0), (2, 8, 1800.0), (4, 16, 3000.0)):
    lay = long_layout if nodes == 4 else "dp%d-tp1-pp1-cp1" % ranks
    pid = "n%d-r%d-rep0" % (nodes, ranks)
    d = os.path.join(w, "camp", "points", pid)
    os.makedirs(os.path.join(d, "predicted"))
    pt = {"id": pid, "dir": "points/" + pid, "nodes": nodes, "ranks": ranks, "layout_name": lay,
          "repeat": 0}
    json.dump(pt, open(os.path.join(d, "point.json"), "w"))
    points.append(pt)
    json.dump({"model": "custom", "layout": {"world": ranks, "dp": ranks, "tp": 1, "pp": 1, "cp": 1},
               "tokens_per_s": tps, "mean_step_s": 4096 / tps, "mfu": tps / 1e4, "final_loss": 0,
               "device": {"kind": "virtual", "virtual_hw": "leonardo-booster", "devices_per_node": 4},
               "virtual": {"hw": "leonardo-booster", "causality_violations": 0}},
              open(os.path.join(d, "predicted", "summary.json"), "w"))
    with open(os.path.join(d, "predicted", "metrics.jsonl"), "w") as f:
        for s in (1, 2, 3):
            f.write(json.dumps({"step": s, "loss": 0, "tokens_per_s": tps, "step_s": 4096 / tps}) + "\n")
json.dump({"name": "pc", "scaling": "strong", "points": points},
          open(os.path.join(w, "camp", "manifest.json"), "w"))
PY

# 1. the campaign before any run
"$R" "$WORK/camp" > "$WORK/camp.txt" 2>&1 || { cat "$WORK/camp.txt"; fail "meshreport of predictions only"; }
cat "$WORK/camp.txt"
python3 - "$WORK/camp/report" "$WORK/camp.txt" "$LONG" <<'PY' || fail "the report of predictions only"
import csv, math, os, re, sys
rep, out, long_layout = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
md = open(os.path.join(rep, "report.md")).read()
assert "No run succeeded" not in md, md[:600]
assert "predicted only: nothing measured yet.** The virtual device (as leonardo-booster) predicted " \
       "3 points, on 1, 2 and 4 nodes" in md, md[:600]
assert "| tokens/s | ± (std) |" not in md, "a measured table of dashes"
sec = md.split("## Predicted (virtual device)")[1].split("\n## ")[0]
rows = {int(r[1]): r for r in (l.split("|") for l in sec.splitlines()) if len(r) > 2 and r[1].strip().isdigit()}
assert sorted(rows) == [1, 2, 4], rows
for nodes, ranks, tps in ((1, 4, 1000.0), (2, 8, 1800.0), (4, 16, 3000.0)):
    r = [c.strip() for c in rows[nodes]]
    assert int(r[2]) == ranks and float(r[5]) == tps, r
    assert math.isclose(float(r[6]), tps / 1000, abs_tol=0.005), ("speedup", r)
    assert math.isclose(float(r[7].rstrip("%")), tps / 1000 / (ranks / 4) * 100, abs_tol=0.05), ("efficiency", r)
    assert math.isclose(float(r[8].rstrip("%")), tps / 1e4 * 100, abs_tol=0.005), ("MFU", r)
assert "Predicted (virtual device), nothing measured yet:" in out and "| 4 | 16 | %s |" % long_layout in out, out
s = {int(r["nodes"]): r for r in csv.DictReader(open(os.path.join(rep, "summary.csv")))}
assert math.isclose(float(s[4]["predicted_speedup"]), 3.0) and math.isclose(float(s[4]["predicted_efficiency"]), 0.75), s[4]
# predicted.png: the x range holds the three bars, the y range the tallest
# (3000) with room above it, a tick per point with its nodes; speedup.png
# and efficiency.png drawn from the predictions
gp = open(os.path.join(rep, "plots.gp")).read()
blk = gp.split("set output 'predicted.png'")[1].split("set output")[0]
lo, hi = map(float, re.search(r"set xrange \[([-0-9.]+):([-0-9.]+)\]", blk).groups())
top = float(re.search(r"set yrange \[0:([0-9.e+]+)\]", blk).group(1))
assert lo < -0.3 and hi > 2.3 and top >= 3000 * 1.2, (lo, hi, top)
for tick in ('"1 node, 4 ranks\\n', '"2 nodes, 8 ranks\\n', '"4 nodes, 16 ranks\\n'):
    assert tick in blk, (tick, blk)
assert "title 'measured'" not in gp and "title 'predicted (virtual device)'" in gp
assert "set output 'speedup.png'" in gp and "'predicted.dat' using 2:6" in gp
if os.path.exists(os.path.join(rep, "gnuplot.log")) or any(f.endswith(".png") for f in os.listdir(rep)):
    for png in ("predicted.png", "speedup.png", "efficiency.png"):
        assert open(os.path.join(rep, png), "rb").read(4) == b"\x89PNG", png
        assert "![%s]" % ("predicted tokens/s" if png == "predicted.png" else png[:-4]) in md, png
print("ok   predictions only: labelled, per point with its nodes, speedup, efficiency, MFU; "
      "predicted.png holds every point")
PY

# 2. the predicted directories reported directly, and one with no point.json
mkdir -p "$WORK/loose" && cp -r "$WORK/camp/points/n4-r16-rep0/predicted" "$WORK/loose/virt16"
"$R" "$WORK"/camp/points/*/predicted "$WORK/loose/virt16" --out "$WORK/direct" > "$WORK/direct.txt" 2>&1 ||
  { cat "$WORK/direct.txt"; fail "meshreport of the predicted directories"; }
cat "$WORK/direct.txt"
python3 - "$WORK/direct" "$WORK/direct.txt" <<'PY' || fail "the predicted runs reported directly"
import csv, os, sys
rep, out = sys.argv[1], open(sys.argv[2]).read()
runs = list(csv.DictReader(open(os.path.join(rep, "runs.csv"))))
got = sorted((r["id"], int(r["nodes"]), r["ok"], r["status"]) for r in runs)
want = sorted([("n1-r4-rep0", 1, "0"), ("n2-r8-rep0", 2, "0"), ("n4-r16-rep0", 4, "0"), ("virt16", 4, "0")])
assert [g[:3] for g in got] == want, got
assert all(g[3] == "predicted (virtual device as leonardo-booster)" for g in got), got
md = open(os.path.join(rep, "report.md")).read()
assert "predicted only: nothing measured yet" in md and "| tokens/s | ± (std) |" not in md, md[:600]
assert "## Failed or missing runs\n\nNone." in md, "a prediction listed as failed"
assert "No loss or tokens/s against step: the virtual device computes no values (its loss is 0)" in md
assert "loss.png" not in md and not os.path.exists(os.path.join(rep, "loss.png")), "an all-zero loss plot"
assert len(list(csv.DictReader(open(os.path.join(rep, "steps.csv"))))) == 0, "steps of a virtual run"
gp = open(os.path.join(rep, "plots.gp")).read()
assert "'loss.png'" not in gp and "title 'measured'" not in gp, "measured in plots.gp"
assert out.startswith("meshtrain runs: predicted only (virtual device), 4 points"), out.splitlines()[0]
assert "failed or missing:" not in out and "ranks > cores" not in out + md, out
print("ok   the predicted runs directly: predictions with their nodes, not measured, no loss plot")
PY

# 3. two points measured: side by side
python3 - "$WORK/camp" <<'PY'
import json, os, sys
for pid, ranks, tps in (("n1-r4-rep0", 4, 900.0), ("n2-r8-rep0", 8, 1530.0)):
    d = os.path.join(sys.argv[1], "points", pid)
    json.dump({"model": "custom", "layout": {"world": ranks, "dp": ranks, "tp": 1, "pp": 1, "cp": 1},
               "tokens_per_s": tps, "mean_step_s": 4096 / tps, "mfu": tps / 1.2e4, "final_loss": 4.5,
               "device": {"kind": "cuda"}}, open(os.path.join(d, "summary.json"), "w"))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in (1, 2, 3):
            f.write(json.dumps({"step": s, "loss": 5 - s / 10, "tokens_per_s": tps, "step_s": 4096 / tps}) + "\n")
    open(os.path.join(d, "status"), "w").write("done\n")
PY
"$R" "$WORK/camp" > "$WORK/both.txt" 2>&1 || { cat "$WORK/both.txt"; fail "meshreport, measured and predicted"; }
"$R" "$WORK/camp/points/n2-r8-rep0" "$WORK/camp/points/n2-r8-rep0/predicted" --out "$WORK/pair" > /dev/null 2>&1 ||
  fail "meshreport of a run and its predicted/"
python3 - "$WORK" <<'PY' || fail "measured and predicted side by side"
import csv, math, os, sys
w = sys.argv[1]
rep = os.path.join(w, "camp", "report")
md = open(os.path.join(rep, "report.md")).read()
assert "Reference: 4 ranks on 1 node (dp4-tp1-pp1-cp1), 900.0 tokens/s." in md, md[:500]
assert "| 2 | 8 | dp8-tp1-pp1-cp1 | 1/1 | 1530.0 |" in md and "| 1800.0 | 0.850 |" in md, "the measured table"
sec = md.split("## Predicted (virtual device)")[1].split("\n## ")[0]
assert "measured tokens/s | measured/predicted | measured efficiency |" in sec, sec
assert "| 2 | 8 | dp8-tp1-pp1-cp1 | 2.276 | 1800.0 | 1.80 | 90.0% | 18.00% | 1530.0 | 0.850 | 85.0% |" in sec, sec
assert "- `n4-r16-rep0` (4 nodes, 16 ranks, " in md, "the point not run yet"
# a point whose job has not run is listed as not run yet, not as failed
notrun = md.split("## Not run yet")[1].split("\n## ")[0]
failed = md.split("## Failed or missing runs")[1].split("\n## ")[0]
assert "`n4-r16-rep0`" in notrun and "`n4-r16-rep0`" not in failed, (failed, notrun)
s = {int(r["nodes"]): r for r in csv.DictReader(open(os.path.join(rep, "summary.csv")))}
assert math.isclose(float(s[2]["speedup"]), 1.7) and math.isclose(float(s[2]["predicted_speedup"]), 1.8), s[2]
gp = open(os.path.join(rep, "plots.gp")).read()
sp = gp.split("set output 'speedup.png'")[1].split("set output")[0]
assert "title 'measured'" in sp and "title 'predicted (virtual device)'" in sp, sp
pr = gp.split("set output 'predicted.png'")[1].split("set output")[0]
assert "using ($1-0.2):3 with boxes" in pr and "using ($1+0.2):4 with boxes" in pr, pr
assert "![loss](loss.png)" in md
pair = list(csv.DictReader(open(os.path.join(w, "pair", "summary.csv"))))
assert len(pair) == 1 and pair[0]["runs"] == "1" and pair[0]["runs_ok"] == "1", pair
assert math.isclose(float(pair[0]["measured_over_predicted"]), 0.85), pair
print("ok   measured and predicted side by side: tables, summary.csv, speedup.png, predicted.png")
PY
echo PASS
