# A 2-point strong-scaling campaign on a real Slurm, end to end: sweep spec ->
# point directories -> each point emulated here first (--emulate: the virtual
# device) -> submit.sh (a chain, then the report job afterany) -> meshreport
# in its own job, which prints its table once. The report's numbers are
# checked against the runs' own summary.json and metrics.jsonl, its
# predicted ones against the emulated runs' summary.json.
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/cluster.sh"
cluster_start
corpus=$(mt_corpus 200000)
cat > "$WORK/sweep.ini" <<INI
[campaign]
name = tiny-strong-test
system = local
scaling = strong
ranks = 2, 4
layouts = dp-only
repeats = 1
steps = 6
time = 00:05:00
submit = chain

[set]
model.preset = tiny
train.global_batch = 8
train.micro_batch = 2
train.eval_every = 0
train.threads = 1
data.train = $corpus
# the final checkpoint is not what this test measures
ckpt.mode = none
INI
# --emulate first: each point on the virtual device here (its system's
# cpu-generic profile), then the jobs: the report sets them side by side
python3 "$MT_SRC/slurm/meshslurm.py" campaign "$WORK/sweep.ini" --out "$WORK/camp" --bin "$MT_BIN" --submit \
  --emulate --emulate-steps 2 > "$WORK/submit.log" 2>&1 || { cat "$WORK/submit.log"; fail "campaign --submit failed"; }
cat "$WORK/submit.log"
[ "$(wc -l < "$WORK/camp/jobs.txt")" = 3 ] || fail "jobs.txt: expected 2 points + report"
rid=$(awk '$2 == "report" {print $1}' "$WORK/camp/jobs.txt")
st=$(cluster_wait "$rid" 200)
echo "report job $rid: $st"
for d in "$WORK"/camp/points/*; do echo "== $d"; cat "$d"/slurm-*.out 2>/dev/null | tail -3; done
[ "${st% *}" = "COMPLETED 0:0" ] || { cat "$WORK"/camp/report/slurm-*.out; fail "report job ended '$st'"; }
p2="$WORK/camp/points/n1-r2-dp2-tp1-pp1-cp1-rep0" p4="$WORK/camp/points/n2-r4-dp4-tp1-pp1-cp1-rep0"
for d in "$p2" "$p4"; do
  [ "$(cat "$d/status")" = done ] || fail "$d: status '$(cat "$d/status")'"
done
# the chain: the 4-rank point started only after the 2-rank point had finished
end2=$(date -r "$p2/summary.json" +%s); start4=$(sed -n 's/.* start=\([0-9]*\)$/\1/p' "$p4/slurm-env.txt" | head -1)
[ "$start4" -ge "$end2" ] || fail "points overlapped: 4-rank start $start4 < 2-rank end $end2"
[ "$(grep -c '| 2 | 4 | dp4-tp1-pp1-cp1 | 1/1 |' "$WORK"/camp/report/slurm-*.out)" = 1 ] ||
  fail "the report job did not print its table exactly once"
# the 4 ranks of the emulated nodes share this machine: flagged where they outnumber its CPUs
row4=$(grep '^| 2 | 4 | dp4-tp1-pp1-cp1 |' "$WORK/camp/report/report.md")
if [ "$(nproc --all)" -lt 4 ]; then
  grep -q 'ranks > cores |$' <<< "$row4" || fail "4 ranks on $(nproc --all) CPUs not flagged: $row4"
else
  grep -q 'ranks > cores' <<< "$row4" && fail "4 ranks on $(nproc --all) CPUs flagged: $row4"
fi
python3 - "$WORK/camp" "$p2" "$p4" <<'PY' || fail "report numbers disagree with the runs"
import csv, json, math, os, sys
camp, p2, p4 = sys.argv[1:]
rows = {int(r["ranks"]): r for r in csv.DictReader(open(os.path.join(camp, "report", "summary.csv")))}
s2, s4 = (json.load(open(os.path.join(p, "summary.json"))) for p in (p2, p4))
def close(a, b, what):
    assert math.isclose(float(a), b, rel_tol=1e-6), "%s: report %s, runs %r" % (what, a, b)
# throughput over every step (summary.json run: tokens / time of all steps)
for p, s in ((p2, s2), (p4, s4)):
    m = [json.loads(l) for l in open(os.path.join(p, "metrics.jsonl"))]
    close(s["run"]["tokens_per_s"], sum(x["tokens"] for x in m) / sum(x["step_s"] for x in m),
          "run tokens/s of %s" % p)
    assert s["run"]["restarts"] == 0 and s["run"]["steps"] == 6
close(rows[2]["tokens_per_s_mean"], s2["run"]["tokens_per_s"], "tokens/s at 2 ranks")
close(rows[4]["tokens_per_s_mean"], s4["run"]["tokens_per_s"], "tokens/s at 4 ranks")
close(rows[4]["tokens_per_s_per_rank"], s4["run"]["tokens_per_s"] / 4, "tokens/s/rank at 4 ranks")
close(rows[4]["mfu_mean"], s4["run"]["mfu"], "MFU at 4 ranks")
S = s4["run"]["tokens_per_s"] / s2["run"]["tokens_per_s"]
close(rows[4]["speedup"], S, "speedup"); close(rows[4]["efficiency"], S * 2 / 4, "efficiency")
m = [json.loads(l) for l in open(os.path.join(p4, "metrics.jsonl"))][1:]
close(rows[4]["compute_s"], sum(x["time_s"]["compute"] for x in m) / len(m), "compute breakdown")
close(rows[4]["dp_comm_s"], sum(x["time_s"]["dp_comm"] for x in m) / len(m), "dp_comm breakdown")
assert rows[2]["nodes"] == "1" and rows[4]["nodes"] == "2"
# predicted (campaign --emulate) beside measured
for n, p, s in ((2, p2, s2), (4, p4, s4)):
    v = json.load(open(os.path.join(p, "predicted", "summary.json")))
    assert v["virtual"]["hw"] == "cpu-generic" and v["steps"] == 2 and v["layout"]["world"] == n, v["layout"]
    close(rows[n]["predicted_tokens_per_s"], v["tokens_per_s"], "predicted tokens/s at %d ranks" % n)
    close(rows[n]["measured_over_predicted"], s["run"]["tokens_per_s"] / v["tokens_per_s"],
          "measured/predicted at %d ranks" % n)
pred = list(csv.DictReader(open(os.path.join(camp, "predicted.csv"))))
assert [r["status"] for r in pred] == ["done", "done"], pred
assert "| predicted tokens/s | measured/predicted |" in open(os.path.join(camp, "report", "report.md")).read()
for png in ("speedup.png", "efficiency.png", "breakdown.png", "loss.png", "tokens_per_s.png", "predicted.png"):
    assert open(os.path.join(camp, "report", png), "rb").read(4) == b"\x89PNG", png
# one loss line per layout: both points' losses (equal across layouts) in steps.csv
steps = list(csv.DictReader(open(os.path.join(camp, "report", "steps.csv"))))
for lay, p in (("dp2-tp1-pp1-cp1", p2), ("dp4-tp1-pp1-cp1", p4)):
    m = [json.loads(l) for l in open(os.path.join(p, "metrics.jsonl"))]
    got = [float(x["loss"]) for x in steps if x["layout"] == lay]
    assert len(got) == 6 and all(math.isclose(a, b["loss"], rel_tol=1e-8) for a, b in zip(got, m)), lay
assert len({x["series"] for x in steps}) == 2, "not one series per layout"
print("report: tokens/s %.0f -> %.0f, speedup %.3f, efficiency %.3f (matches the runs)" %
      (s2["run"]["tokens_per_s"], s4["run"]["tokens_per_s"], S, S / 2))
PY
echo "PASS: 2-point campaign ran as a chain and its report matches the runs"
