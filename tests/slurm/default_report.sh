# The default job's shape in small (apps/scripts/run-default.sh: dp=4 with
# ZeRO-1 stops after a checkpoint, dp=2 resumes it and finishes), then its
# report: summary.json records both attempts, and meshreport's steps.csv,
# loss.png and tokens_per_s.png show both parts of the run, the dp=4 part and
# the resumed dp=2 part, with the losses of metrics.jsonl. Its final
# checkpoint resumed in a new directory is a run of its own, labelled
# "resumed from" that checkpoint, with steps and tokens counted from there.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
out="$WORK/default"
TRAIN=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8 --set train.micro_batch=2
       --set train.eval_every=5 --set data.train="$corpus" --set train.threads=1 --set output.dir="$out")
mt_mpirun 4 "$MT_BIN/meshtrain" "${TRAIN[@]}" --set parallel.dp=4 --set parallel.zero=1 \
  --set train.stop_after=6 > "$WORK/part1.log" 2>&1 || { cat "$WORK/part1.log"; fail "part 1 (dp=4)"; }
mt_mpirun 2 "$MT_BIN/meshtrain" "${TRAIN[@]}" --set parallel.dp=2 --set parallel.zero=0 \
  --set train.resume=auto > "$WORK/part2.log" 2>&1 || { cat "$WORK/part2.log"; fail "part 2 (dp=2)"; }
"$MT_BIN/meshreport" "$out" --out "$out/report" --name "default job" > "$WORK/report.log" 2>&1 ||
  { cat "$WORK/report.log"; fail "meshreport"; }
cat "$WORK/report.log"
python3 - "$out" <<'PY' || fail "the report does not show both parts of the run"
import csv, json, math, os, sys
out = sys.argv[1]
rep = os.path.join(out, "report")
s = json.load(open(os.path.join(out, "summary.json")))
a, run = s["attempts"], s["run"]
assert [(x["start_step"], x["end_step"], x["layout"], x["world"]) for x in a] == \
    [(0, 6, "dp4-tp1-pp1-cp1", 4), (6, 10, "dp2-tp1-pp1-cp1", 2)], a
assert run["attempts"] == 2 and run["restarts"] == 1 and run["steps"] == 10, run
m = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
steps = list(csv.DictReader(open(os.path.join(rep, "steps.csv"))))
assert [int(x["step"]) for x in steps] == list(range(1, 11)), "steps.csv steps"
assert all(math.isclose(float(x["loss"]), y["loss"], rel_tol=1e-8) for x, y in zip(steps, m)), "losses"
assert [x["layout"] for x in steps] == ["dp4-tp1-pp1-cp1"] * 6 + ["dp2-tp1-pp1-cp1"] * 4, "layouts"
assert [x["series"] for x in steps] == ["0"] * 6 + ["1"] * 4, "one series per part"
vals = {int(x["step"]): float(x["val_loss"]) for x in steps if x["val_loss"]}
assert sorted(vals) == [5, 10] and all(math.isclose(vals[k], y["val_loss"], rel_tol=1e-8)
                                       for k, y in ((y["step"], y) for y in m if "val_loss" in y)), vals
gp = open(os.path.join(rep, "plots.gp")).read()
for t in ("4 ranks, dp4-tp1-pp1-cp1, steps 1-6", "2 ranks, dp2-tp1-pp1-cp1, steps 7-10",
          "set arrow from 6, graph 0", "resumed after step 6"):
    assert t in gp, "plots.gp lacks %r" % t
md = open(os.path.join(rep, "report.md")).read()
for t in ("| `default` | 1 | 1-6 | dp4-tp1-pp1-cp1 | 4 | 0 |", "| `default` | 2 | 7-10 | dp2-tp1-pp1-cp1 | 2 | 0 |",
          "![loss](loss.png)", "![tokens/s](tokens_per_s.png)"):
    assert t in md, "report.md lacks %r" % t
for png in ("loss.png", "tokens_per_s.png"):
    assert open(os.path.join(rep, png), "rb").read(8) == b"\x89PNG\r\n\x1a\n", png
print("both parts in the report: steps 1-6 dp=4, 7-10 dp=2, losses as in metrics.jsonl")
PY
# the finished run's checkpoint resumed in a new directory (as after a
# resharding convert): a run of its own from step 10, labelled "resumed from"
# that checkpoint, its steps and tokens counted from there
new="$WORK/continued"
mt_mpirun 2 "$MT_BIN/meshtrain" "${TRAIN[@]}" --set parallel.dp=2 --set train.steps=14 \
  --set train.resume="$out/checkpoints" --set output.dir="$new" > "$WORK/part3.log" 2>&1 ||
  { cat "$WORK/part3.log"; fail "part 3 (resumed in a new directory)"; }
"$MT_BIN/meshreport" "$new" --out "$new/report" > "$WORK/report3.log" 2>&1 || { cat "$WORK/report3.log"; fail "meshreport (part 3)"; }
python3 - "$new" "$out" <<'PYEND' || fail "the run resumed in a new directory"
import csv, json, os, sys
new, old = sys.argv[1:]
s = json.load(open(os.path.join(new, "summary.json")))
run, a = s["run"], s["attempts"]
m = [json.loads(l) for l in open(os.path.join(new, "metrics.jsonl"))]
print("run:", run)
assert [x["step"] for x in m] == [11, 12, 13, 14], "metrics.jsonl steps"
assert len(a) == 1 and (a[0]["start_step"], a[0]["end_step"]) == (10, 14), a
assert run["attempts"] == 1 and run["restarts"] == 0, "counted as a restart"
assert run["steps"] == 4 and run["start_step"] == 10, "run steps"
assert run["tokens"] == 4 * s["tokens_per_step"] == sum(x["tokens"] for x in m), "run tokens"
assert run["resumed_from"] == os.path.join(old, "checkpoints", "step_10"), run["resumed_from"]
rep = os.path.join(new, "report")
md = open(os.path.join(rep, "report.md")).read()
want = "- `continued` (2 ranks, dp2-tp1-pp1-cp1): resumed from %s/checkpoints/step_10, steps 11-14" % old
assert want in md, "report.md lacks %r" % want
gp = open(os.path.join(rep, "plots.gp")).read()
assert "set label 'continued: resumed from %s/checkpoints/step_10'" % old in gp, "no label on the plot"
assert "title '2 ranks, dp2-tp1-pp1-cp1, from the step-10 checkpoint'" in gp, "series title"
steps = list(csv.DictReader(open(os.path.join(rep, "steps.csv"))))
assert [int(x["step"]) for x in steps] == [11, 12, 13, 14]
print("resumed in a new directory: steps 11-14, 4 steps and their tokens, labelled")
PYEND
echo "PASS: the default job's report shows the dp=4 part and the resumed dp=2 part; a resume in a new directory is a run of its own"
