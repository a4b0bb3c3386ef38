# meshreport on hand-made run directories with known numbers: speedup,
# efficiency (strong and weak), mean and spread over repeats, the step-time
# breakdown, bench rows, failed/missing/corrupt runs listed (not fatal), a run
# whose ranks outnumbered its node's cores flagged, steps.csv holding each
# point's losses (the data of loss.png and tokens_per_s.png), gnuplot PNGs
# and the script behind them (markers, validation, ticks, labels), the script
# and data written without gnuplot with one line saying how to draw them, a
# single run without scaling columns and its tokens/s averaged, and one-line
# errors for bad input.
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

# the plot script: distinct markers per series, validation drawn in colours no
# training line has, rank counts as ticks, values at the points, the ideal
# inside the frame
python3 - "$rep/plots.gp" <<'PYEND' || fail "plots.gp"
import re, sys
gp = open(sys.argv[1]).read()
train = re.findall(r"index (\d+) using 1:2 with linespoints lw 2 lc rgb '#(\w+)' pt (\d+)", gp)
val = re.findall(r"with linespoints dt 2 lw 2 pt 7 ps 1.5 lc rgb '#(\w+)' title 'validation", gp)
assert len(train) == 3 and len({t[2] for t in train}) == 3, "markers: %s" % train
assert len(val) == 3 and not {t[1] for t in train} & set(val), "validation colours %s vs %s" % (val, train)
assert 'set xtics ("1" 1, "2" 2, "4" 4)' in gp, "rank ticks"
assert gp.count("with labels offset 0,1.2") == 2, "values at the points"
top = float(re.search(r"set output 'speedup.png'.*?set yrange \[0:([0-9.]+)\]", gp, re.S).group(1))
assert top > 4 * 1.1, "the ideal speedup (4) touches the frame: top %g" % top
top = float(re.search(r"set output 'efficiency.png'.*?set yrange \[0:([0-9.]+)\]", gp, re.S).group(1))
assert top > 100 * 1.1, "the ideal efficiency (100%%) touches the frame: top %g" % top
assert gp.count("set grid") == 1 and "unset grid" not in gp
print("plots.gp: markers, validation colours, ticks, labels and ranges OK")
PYEND

# without gnuplot: the script and its data still written, one line on stdout
# saying how to draw them (apt-get on Debian, module load on a cluster); the
# script then draws every PNG from what was written
mkdir -p "$WORK/nognu"
env -u MODULEPATH -u MODULESHOME -u LMOD_CMD PATH=/nonexistent "$R" "$WORK/c" --out "$WORK/nognu" > "$WORK/nognu.txt" ||
  fail "meshreport without gnuplot failed"
for f in plots.gp steps.dat scaling.dat busbw.dat steps.csv report.md; do [ -s "$WORK/nognu/$f" ] || fail "no gnuplot: no $f"; done
if ls "$WORK"/nognu/*.png > /dev/null 2>&1; then fail "PNGs without gnuplot?"; fi
[ "$(grep -c '^plots: ' "$WORK/nognu.txt")" = 1 ] || fail "no gnuplot: not one 'plots:' line: $(cat "$WORK/nognu.txt")"
if [ -f /etc/debian_version ]; then
  grep -q "^plots: gnuplot not found: the plot script and its data are written; to draw them: apt-get install gnuplot-nox, then cd $WORK/nognu && gnuplot plots.gp$" \
    "$WORK/nognu.txt" || fail "no gnuplot (Debian): $(grep '^plots' "$WORK/nognu.txt")"
fi
grep -q "Not drawn here: gnuplot not found" "$WORK/nognu/report.md" || fail "report.md does not say the plots were not drawn"
env MODULEPATH=/opt/modules PATH=/nonexistent "$R" "$WORK/c" --out "$WORK/nognu" |
  grep -q "to draw them: module load gnuplot, then cd $WORK/nognu && gnuplot plots.gp" ||
  fail "no gnuplot on a cluster: no 'module load gnuplot'"
(cd "$WORK/nognu" && gnuplot plots.gp) || fail "gnuplot plots.gp in the written directory failed"
for png in speedup.png efficiency.png breakdown.png busbw.png loss.png tokens_per_s.png; do
  [ "$(head -c 4 "$WORK/nognu/$png" | tail -c 3)" = PNG ] || fail "$png not drawn from the written script"
done

# a single run: no scaling columns, named after its directory; a long run's
# tokens/s as a moving average (steps.csv tokens_per_s_avg: the mean of the
# last W steps, W = steps / 50), each step's value faint
python3 - "$WORK/long" <<'PYEND'
import json, os, sys
d = sys.argv[1]; os.makedirs(d)
with open(os.path.join(d, "metrics.jsonl"), "w") as f:
    for s in range(1, 301):
        f.write(json.dumps({"step": s, "loss": 5 - s / 100, "tokens_per_s": 1000.0 + (s % 7) * 100,
                            "step_s": 0.1, "tokens": 100}) + "\n")
json.dump({"model": "tiny", "layout": {"world": 2, "dp": 2, "tp": 1, "pp": 1, "cp": 1}, "tokens_per_s": 1300.0,
           "mean_step_s": 0.1, "mfu": 0.1, "final_loss": 2.0}, open(os.path.join(d, "summary.json"), "w"))
PYEND
"$R" "$WORK/long" --out "$WORK/long/report" > "$WORK/long.txt" || fail "single run"
head -1 "$WORK/long.txt" | grep -q "^long: 1 run, 0 failed or missing$" || fail "single run header: $(head -1 "$WORK/long.txt")"
if grep -q "speedup\|efficiency" "$WORK/long.txt" "$WORK/long/report/report.md"; then fail "a single run with scaling columns"; fi
grep -q "^# long$" "$WORK/long/report/report.md" || fail "single run: report.md not named after the run"
[ ! -e "$WORK/long/report/speedup.png" ] || fail "a single run has a speedup plot"
python3 - "$WORK/long/report" <<'PYEND' || fail "tokens/s moving average"
import csv, math, os, sys
rows = list(csv.DictReader(open(os.path.join(sys.argv[1], "steps.csv"))))
w = 6  # 300 steps / 50
for i, r in enumerate(rows):
    last = [float(x["tokens_per_s"]) for x in rows[max(0, i - w + 1):i + 1]]
    assert math.isclose(float(r["tokens_per_s_avg"]), sum(last) / len(last), rel_tol=1e-8), (i, r)
gp = open(os.path.join(sys.argv[1], "plots.gp")).read()
assert "mean of the last 6 steps (each step: faint)" in gp and "lc rgb '#A0" in gp, "faint raw series"
print("single run: no scaling columns; tokens/s averaged over 6 steps")
PYEND

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
