# meshreport timeline: one step of a traced run, every pipeline stage on one
# time axis, for a virtual run (pp 2 interleaved x dp 2: two ranks a stage)
# and a real one (pp 2 1f1b on the CPU). Checked against the ranks' own
# trace files, recomputed here: the merged timeline.json holds every event
# of every rank; timeline.csv has one row per stage, for the stage's lowest
# rank, whose step time is that rank's step span and whose forward,
# backward, wait, collective and send times are the sums of its spans inside
# the step (forward, backward and sends never none: real runs trace their
# sends on the point-to-point track as virtual ones do); the
# idle share is 1 - (forward + backward) / step; timeline.dat draws exactly
# those spans; ops.csv gives each op's calls and time in the step, the
# sums of its "op" spans (the virtual device's ops, and the real CPU run's:
# metrics.trace times every op of the CPU's table), matmuls, attention,
# layernorm and GELU among them; the PNG is drawn where gnuplot runs (else one line says how).
# Bad input: a run without a trace, a step the trace does not hold: one
# line, exit 2.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
R="$MT_BIN/meshreport"
net=(--set model.preset=custom --set model.n_layer=8 --set model.n_embd=64 --set model.n_head=4
     --set model.seq_len=64 --set train.global_batch=8 --set train.micro_batch=1 --set parallel.pp=2
     --set data.train="$corpus" --set train.steps=3 --set train.eval_every=0 --set ckpt.mode=none
     --set metrics.trace=true)
mt_mpirun 4 "$MT_BIN/meshtrain" "${net[@]}" --set parallel.dp=2 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.device=virtual --set train.virtual_hw=h200 \
  --set output.dir="$WORK/virtual" > "$WORK/virtual.log" 2>&1 || { cat "$WORK/virtual.log"; fail "virtual run"; }
mt_mpirun 2 "$MT_BIN/meshtrain" "${net[@]}" --set parallel.schedule=1f1b --set output.dir="$WORK/real" \
  > "$WORK/real.log" 2>&1 || { cat "$WORK/real.log"; fail "real run"; }

check() { # RUN STEP RANKS: meshreport timeline RUN [--step STEP], checked
  local run=$1 step=$2 ranks=$3 args=()
  [ "$step" = last ] || args=(--step "$step")
  mt_guard "$R" timeline "$WORK/$run" "${args[@]}" --out "$WORK/tl_$run" > "$WORK/tl_$run.log" 2>&1 ||
    { cat "$WORK/tl_$run.log"; fail "$run: meshreport timeline"; }
  cat "$WORK/tl_$run.log"
  python3 - "$WORK/$run" "$WORK/tl_$run" "$step" "$ranks" <<'PY' || fail "$run: timeline against the traces"
import csv, json, os, sys
run, out, step, ranks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tr = {r: json.load(open(os.path.join(run, "trace", "rank%d.json" % r)))["traceEvents"] for r in range(ranks)}
merged = json.load(open(os.path.join(out, "timeline.json")))["traceEvents"]
assert len(merged) == sum(len(e) for e in tr.values()), "merged: %d events" % len(merged)
assert {e["pid"] for e in merged} == set(range(ranks)), "merged: not every rank"
stage_of = {}
for r, ev in tr.items():
    name = next(e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name")
    stage_of[r] = int(name.split(" pp ")[1].split()[0])
steps = lambda r: {e["args"]["step"]: e for e in tr[r] if e["ph"] == "X" and e["cat"] == "step"}
want_step = min(max(steps(r)) for r in tr) if step == "last" else int(step)
rows = list(csv.DictReader(open(os.path.join(out, "timeline.csv"))))
n_stages = max(stage_of.values()) + 1
assert len(rows) == n_stages, "%d rows for %d stages" % (len(rows), n_stages)
drawn = 0
kinds = {"forward": "pipeline", "backward": "pipeline", "wait": "pipeline", "send": "send",
         "collective": "collective"}
for s, row in enumerate(rows):
    rep = min(r for r in tr if stage_of[r] == s)
    assert int(row["stage"]) == s and int(row["rank"]) == rep and int(row["step"]) == want_step, row
    w = steps(rep)[want_step]
    t0, t1 = w["ts"], w["ts"] + w["dur"]
    close = lambda a, b: abs(a - b) <= 1e-5 + 1e-6 * abs(b)
    assert close(float(row["step_ms"]), w["dur"] / 1e3), (row["step_ms"], w["dur"])
    def total(pred):
        sp = [e for e in tr[rep] if e["ph"] == "X" and pred(e) and t0 <= e["ts"] and e["ts"] + e["dur"] <= t1]
        return sum(e["dur"] for e in sp) / 1e3, len(sp)
    busy = 0.0
    for kind, cat in kinds.items():
        ms, n = total(lambda e: e["cat"] == cat and (cat != "pipeline" or e["name"] == kind))
        assert close(float(row[kind + "_ms"]), ms), (s, kind, row[kind + "_ms"], ms)
        drawn += n
        if kind in ("forward", "backward", "send"):
            assert n > 0, "stage %d: no %s span in the step" % (s, kind)
        if kind in ("forward", "backward"):
            busy += ms
    idle = float(row["idle_share"])
    assert 0.0 <= idle < 1.0 and close(idle, 1 - busy / (w["dur"] / 1e3)), (s, idle, busy)
    print("stage %d (rank %d): step %.4f ms, busy %.4f ms, idle %.1f%%" % (s, rep, w["dur"] / 1e3, busy, 100 * idle))
dat = [l for l in open(os.path.join(out, "timeline.dat")) if not l.startswith("#")]
assert len(dat) == drawn, "timeline.dat: %d spans drawn, %d in the step" % (len(dat), drawn)
# ops.csv: per stage, each op's calls and time in the step, from the "op"
# spans (the virtual device's ops; the CPU's own under metrics.trace)
ops = list(csv.DictReader(open(os.path.join(out, "ops.csv"))))
for s in range(n_stages):
    rep = min(r for r in tr if stage_of[r] == s)
    w = steps(rep)[want_step]
    t0, t1 = w["ts"], w["ts"] + w["dur"]
    want = {}
    for e in tr[rep]:
        if e["ph"] == "X" and e["cat"] == "op" and t0 <= e["ts"] and e["ts"] + e["dur"] <= t1:
            c = want.setdefault(e["name"], [0, 0.0])
            c[0] += 1
            c[1] += e["dur"] / 1e3
    got = {r["op"]: (int(r["calls"]), float(r["ms"])) for r in ops if int(r["stage"]) == s}
    assert all(int(r["rank"]) == rep and int(r["step"]) == want_step for r in ops if int(r["stage"]) == s)
    assert set(got) == set(want), (s, sorted(got), sorted(want))
    for op, (n, ms) in want.items():
        assert got[op][0] == n and abs(got[op][1] - ms) <= 1e-5 + 1e-6 * ms, (s, op, got[op], n, ms)
    for op in ("matmul_forward", "matmul_backward_first", "attn_forward", "attn_backward_first",
               "layernorm_forward", "gelu_backward_first"):
        assert op in got and got[op][0] > 0, "stage %d: no %s op in the step" % (s, op)
    print("stage %d: %d ops in ops.csv, matmul_forward %d calls %.4f ms" % (
        s, len(got), got["matmul_forward"][0], got["matmul_forward"][1]))
PY
  if command -v gnuplot > /dev/null; then
    [ "$(head -c 4 "$WORK/tl_$run/timeline.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$run: no PNG"
  else
    grep -q "gnuplot not found" "$WORK/tl_$run.log" || fail "$run: no word on the missing gnuplot"
  fi
}
check virtual last 4
check real 2 2

# bad input: no trace; a step the trace does not hold
bad() { # NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  set +e; mt_guard "$R" timeline "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"; local rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c . "$WORK/$name.err")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.err" ||
    { cat "$WORK/$name.err"; fail "$name: rc $rc, want exit 2 and one line matching /$re/"; }
  echo "ok   $name: $(cat "$WORK/$name.err")"
}
mkdir -p "$WORK/untraced"
bad no_trace "untraced: no trace directory .*metrics.trace = true" "$WORK/untraced"
bad no_step "holds no step 9 \(steps 1\.\.3 are in every rank's trace\)" "$WORK/real" --step 9
bad bad_step "--step: expected a step number" "$WORK/real" --step x
echo PASS
