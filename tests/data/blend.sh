# Sources and blends end to end (issue 38): two sources of shards (llm.c
# version-1 shards in a directory, version-2 shards by glob) blended
# 0.7/0.3. The global batch's windows (data.hash_batches: a hash per step)
# are the same for dp 1, 2 and 4 with different micro-batches; a run stopped
# at step 3 and resumed under dp 2 reads exactly the windows of the
# uninterrupted run (steps 4..6, counted and compared), and one resumed on
# other weights says so in one line; the validation loss
# per source equals each source's own run (a learning rate of 1e-12 leaves
# the model as initialised), and the overall one is their weighted mean.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
mkdir -p "$WORK/web" "$WORK/code"
split -b 40000 -d -a 2 <(head -c 240000 "$corpus") "$WORK/web/part"
for p in "$WORK"/web/part*; do
  "$MT_BIN/meshdata" encode "$p" "$p.bin" --format llmc > /dev/null || fail "encode $p"
  rm "$p"
done
split -b 20000 -d -a 2 <(tail -c 60000 "$corpus") "$WORK/code/part"
for p in "$WORK"/code/part*; do
  "$MT_BIN/meshdata" encode "$p" "$p.bin" --format llmc2 > /dev/null || fail "encode $p"
  rm "$p"
done
blend="0.7 web=$WORK/web, 0.3 code=$WORK/code/part*.bin"
base=(--set model.preset=tiny --set train.global_batch=8 --set data.blend="$blend"
      --set data.hash_batches=true --set train.warmup_steps=2 --set train.lr=3e-3
      --set train.steps=6 --set train.eval_every=3 --set train.eval_batches=1)
mt_train dp1 1 "${base[@]}" --set parallel.dp=1 --set train.micro_batch=8 --set output.dir="$WORK/dp1"
mt_train dp2 2 "${base[@]}" --set parallel.dp=2 --set train.micro_batch=2 --set output.dir="$WORK/dp2"
mt_train dp4 4 "${base[@]}" --set parallel.dp=4 --set train.micro_batch=1 --set output.dir="$WORK/dp4"
mt_train stop 1 "${base[@]}" --set parallel.dp=1 --set train.micro_batch=4 --set train.stop_after=3 \
  --set output.dir="$WORK/resumed"
mt_train resume 2 "${base[@]}" --set parallel.dp=2 --set train.micro_batch=4 --set train.resume=auto \
  --set output.dir="$WORK/resumed"
grep -q "resumed from .*step_3" "$WORK/resume.log" || fail "the second run did not resume from step 3"
! grep -q "training data differ" "$WORK/resume.log" || fail "a resume on the same data said they differ"
# the same stop resumed on other weights: one warning line (the checkpoint's
# data_hash differs), and the run goes on
mt_train stop_w 1 "${base[@]}" --set train.micro_batch=8 --set train.stop_after=3 \
  --set output.dir="$WORK/reweighted"
mt_train resume_w 2 "${base[@]}" --set parallel.dp=2 --set train.micro_batch=4 --set train.resume=auto \
  --set data.blend="0.5 web=$WORK/web, 0.5 code=$WORK/code/part*.bin" --set output.dir="$WORK/reweighted"
[ "$(grep -c "warning: train.resume: the training data differ from those .*step_3" "$WORK/resume_w.log")" = 1 ] ||
  { cat "$WORK/resume_w.log"; fail "a resume on other blend weights did not warn once"; }
"$MT_BIN/meshckpt" inspect "$WORK/reweighted/checkpoints/latest" | grep -q "data hash" ||
  fail "meshckpt inspect does not show the checkpoint's data hash"
echo "ok   a resume on other weights warns once; the same data do not"

# each source alone, and the blend, evaluated on the model as initialised
same=(--set model.preset=tiny --set train.global_batch=8 --set train.micro_batch=8 --set train.lr=1e-12
      --set train.warmup_steps=0 --set train.steps=1 --set train.eval_every=1 --set train.eval_batches=2)
mt_train val_blend 1 "${same[@]}" --set data.blend="$blend" --set output.dir="$WORK/val_blend"
mt_train val_web 1 "${same[@]}" --set data.train="$WORK/web" --set output.dir="$WORK/val_web"
mt_train val_code 1 "${same[@]}" --set data.train="$WORK/code/part*.bin" --set output.dir="$WORK/val_code"

python3 - "$WORK" <<'PY'
import json, math, sys
w = sys.argv[1]
def recs(d): return [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (w, d))]
def hashes(d): return {r["step"]: r["data_hash"] for r in recs(d)}
ref = hashes("dp1")
assert sorted(ref) == [1, 2, 3, 4, 5, 6], ref
assert len(set(ref.values())) == 6, "steps read the same windows: %s" % ref
for d in ("dp2", "dp4"):
    assert hashes(d) == ref, "%s read other windows than dp 1: %s vs %s" % (d, hashes(d), ref)
# the resumed directory: steps 1..3 from the first run, 4..6 from the resumed one
got = hashes("resumed")
assert got == ref, "interrupted + resumed under dp 2 read other windows: %s vs %s" % (got, ref)
print("ok   6 steps' windows equal for dp 1, 2, 4 and across a stop at 3 resumed under dp 2")
for d in ("dp1", "dp2", "dp4"):
    v = [r for r in recs(d) if "val_loss" in r]
    assert len(v) == 2 and all(set(r["val_loss_by_source"]) == {"web", "code"} for r in v), v
b = [r for r in recs("val_blend") if "val_loss" in r][0]
alone = {s: [r for r in recs("val_" + s) if "val_loss" in r][0]["val_loss"] for s in ("web", "code")}
by = b["val_loss_by_source"]
for s in alone:
    assert math.isclose(by[s], alone[s], rel_tol=1e-6), "source %s: %.9f in the blend, %.9f alone" % (s, by[s], alone[s])
mean = 0.7 * by["web"] + 0.3 * by["code"]
assert math.isclose(b["val_loss"], mean, rel_tol=1e-9), "val_loss %.9f, weighted mean %.9f" % (b["val_loss"], mean)
assert "val_loss_by_source" not in [r for r in recs("val_web") if "val_loss" in r][0], "one source wrote a per-source loss"
print("ok   val loss per source: web %.6f code %.6f, equal to each alone; overall %.6f = 0.7/0.3 mean" % (by["web"], by["code"], b["val_loss"]))
PY
# meshreport's steps.csv carries each step's validation loss per source
"$MT_BIN/meshreport" "$WORK/dp2" --out "$WORK/report" > /dev/null || fail "meshreport"
python3 - "$WORK" <<'PY'
import csv, json, math, sys
w = sys.argv[1]
rows = [r for r in csv.DictReader(open(f"{w}/report/steps.csv")) if r["val_loss_by_source"]]
recs = {json.loads(l)["step"]: json.loads(l) for l in open(f"{w}/dp2/metrics.jsonl")}
assert len(rows) == 2, rows
for r in rows:
    got = {k: float(v) for k, v in (kv.split("=") for kv in r["val_loss_by_source"].split(";"))}
    want = recs[int(r["step"])]["val_loss_by_source"]
    assert set(got) == set(want) and all(math.isclose(got[k], want[k], rel_tol=1e-8) for k in got), (got, want)
print("ok   steps.csv: the validation loss per source of both evaluations")
# val_sources.dat: a block per source, each of both evaluations, drawn in
# val_by_source.png (report.md shows it)
blocks = [b for b in open(f"{w}/report/val_sources.dat").read().split("\n\n\n") if b.strip()]
blocks = [[l for l in b.splitlines() if l and not l.startswith("#")] for b in blocks]
assert len(blocks) == 2 and all(len(b) == 2 for b in blocks), blocks
for b in blocks:
    for l in b:
        step, loss = l.split()
        assert any(math.isclose(float(loss), v, rel_tol=1e-8)
                   for v in recs[int(step)]["val_loss_by_source"].values()), l
assert "val_by_source.png" in open(f"{w}/report/report.md").read()
print("ok   val_sources.dat: 2 sources x 2 evaluations; report.md shows val_by_source.png")
PY
echo PASS
