# The timeline (metrics.trace = true) of a virtual pp 2 run with the
# interleaved schedule (2 chunks a stage, 8 micro-batches, 2 steps): each
# rank writes trace/rank<N>.json as Chrome trace events; on each rank the
# pipeline track's forward and backward spans of a step follow that rank's
# schedule as `meshtrain --print-schedule` lists it (kind, micro-batch,
# chunk), one after the other without overlap (to the file's 0.001 us);
# the compute track's op spans lie inside them; the collectives and sends
# tracks are not empty.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
args=(--set model.preset=custom --set model.n_layer=8 --set model.n_embd=64 --set model.n_head=4
      --set model.seq_len=64 --set train.global_batch=8 --set train.micro_batch=1 --set parallel.pp=2
      --set parallel.schedule=interleaved --set parallel.virtual_stages=2)
"$MT_BIN/meshtrain" "${args[@]}" --print-schedule > "$WORK/schedule.txt" || fail "print-schedule"
mt_mpirun 2 "$MT_BIN/meshtrain" "${args[@]}" --set data.train="$corpus" --set train.steps=2 \
  --set train.eval_every=0 --set ckpt.mode=none --set train.device=virtual \
  --set train.virtual_hw=h200 --set metrics.trace=true --set output.dir="$WORK/run" \
  > "$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "virtual run with metrics.trace failed"; }
python3 - "$WORK" <<'PY'
import json, re, sys
work = sys.argv[1]
# the schedule's compute ops per rank: F and B (with the micro-batch and chunk)
sched, rank = {}, None
for line in open(work + "/schedule.txt"):
    m = re.match(r"# schedule .* rank (\d+):", line)
    if m:
        rank = int(m.group(1)); sched[rank] = []
        continue
    m = re.match(r"(F|B) mb=(\d+) chunk=(\d+)", line)
    if m and rank is not None:
        sched[rank].append((m.group(1), int(m.group(2)), int(m.group(3))))
bad = 0
for r in (0, 1):
    ev = json.load(open("%s/run/trace/rank%d.json" % (work, r)))["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    pipe = sorted((e for e in xs if e["tid"] == 1 and e["name"] in ("forward", "backward")),
                  key=lambda e: e["ts"])
    want = sched[r]
    if not want or len(pipe) != 2 * len(want):
        print("FAIL: rank %d: %d pipeline spans for 2 steps of %d ops" % (r, len(pipe), len(want)))
        bad += 1
        continue
    for step in (0, 1):
        got = [(e["name"][0].upper(), e["args"]["mb"], e["args"]["chunk"])
               for e in pipe[step * len(want):(step + 1) * len(want)]]
        if got != want:
            print("FAIL: rank %d step %d: spans in order %s, schedule %s" % (r, step + 1, got[:8], want[:8]))
            bad += 1
    for a, b in zip(pipe, pipe[1:]):
        if not a["ts"] + a["dur"] <= b["ts"] + 2e-3:
            print("FAIL: rank %d: %s mb %d overlaps the next span" % (r, a["name"], a["args"]["mb"]))
            bad += 1
            break
    ops = [e for e in xs if e["tid"] == 0]
    inside = sum(any(p["ts"] - 2e-3 <= o["ts"] and o["ts"] + o["dur"] <= p["ts"] + p["dur"] + 2e-3
                     for p in pipe) for o in ops[:200])
    if not ops or inside == 0:
        print("FAIL: rank %d: %d op spans, %d inside a pipeline span" % (r, len(ops), inside)); bad += 1
    if not any(e["tid"] == 2 for e in xs) or not any(e["tid"] == 3 for e in xs):
        print("FAIL: rank %d: no collective or no send spans" % r); bad += 1
    print("rank %d: %d spans, %d pipeline spans in schedule order" % (r, len(xs), len(pipe)))
sys.exit(1 if bad else 0)
PY
echo PASS
