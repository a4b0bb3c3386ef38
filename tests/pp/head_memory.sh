# head_memory.sh
# The LM head's activations (final LN, logits, losses) live once per head
# pass in flight, not once per activation set of the stage: tiny with 8
# layers, pp = 2, under 1f1b, interleaved (2 virtual stages), zb-h1, zb-v
# and interleaved in bf16. Growing the vocabulary from 4096 to 8192 adds to
# the planned activation bytes (meshtrain --plan-json) of the stage that
# holds the last virtual stage exactly the head passes in flight x B x T x
# 4096 x the activations' bytes (the logits), and nothing to the other
# stage. The head passes in flight are read off --print-schedule: a
# micro-batch's head pass holds its buffers from its first op (receive or
# forward) to its backward (a split backward: to its weight pass); 1f1b
# and interleaved run the head's forward and backward back to back (one),
# while with sets of several layers the stage holds many. Then interleaved
# and zb-v train 2 steps on 2 ranks: every rank's allocator peaks equal
# the plan's (plan_vs_run.py), and the losses the single-rank run's.
MT_NAME=pp_head_memory
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=8 --set train.global_batch=8
        --set train.micro_batch=1 --set data.train="$corpus" --set train.eval_every=0
        --set ckpt.mode=none --set train.steps=2 --set parallel.pp=2)
cases=("1f1b 1 fp32" "interleaved 2 fp32" "zb-h1 1 fp32" "zb-v 2 fp32" "interleaved 2 bf16")
for c in "${cases[@]}"; do
  read -r sched v prec <<< "$c"
  lay=(--set parallel.schedule="$sched" --set parallel.virtual_stages="$v"
       --set train.precision="$prec")
  "$MT_BIN/meshtrain" --print-schedule "${common[@]}" "${lay[@]}" > "$WORK/$sched-$prec.sched" \
    || fail "print-schedule $sched"
  for V in 4096 8192; do
    "$MT_BIN/meshtrain" --plan "${common[@]}" "${lay[@]}" --set model.vocab_size=$V \
      --plan-json "$WORK/$sched-$prec-$V.plan.json" > /dev/null || fail "plan $sched $V"
  done
done
python3 - "$WORK" "${cases[@]}" <<'PY'
import json, re, sys
work, cases = sys.argv[1], sys.argv[2:]
B, T, dV = 1, 32, 4096                     # micro-batch, tiny's sequence, the vocabulary grown
def heads_in_flight(path, rank, chunk):
    """the most head passes the schedule of `rank` holds at once: its ops
    on `chunk` in program order, each micro-batch's held from its first to
    its backward (a split backward: its weight pass)"""
    seq, r = [], -1
    for line in open(path):
        m = re.match(r"# schedule .* rank (\d+):", line)
        if m:
            r = int(m.group(1))
            continue
        m = re.match(r"(\w+) mb=(\d+) chunk=(\d+)", line)
        if m and r == rank and int(m.group(3)) == chunk:
            seq.append((m.group(1), int(m.group(2))))
    split = any(k == "BW" for k, _ in seq)
    held = most = 0
    for i, (k, mb) in enumerate(seq):
        if all(mb2 != mb for _, mb2 in seq[:i]):
            held += 1
        most = max(most, held)
        if k == ("BW" if split else "B"):
            held -= 1
    return most
bad = 0
for c in cases:
    sched, v, prec = c.split()
    es = 2 if prec == "bf16" else 4
    # the last virtual stage: rank 1's last chunk (looping), rank 0's second (the V of zb-v)
    rank, chunk = (0, 1) if sched == "zb-v" else (1, int(v) - 1)
    heads = heads_in_flight("%s/%s-%s.sched" % (work, sched, prec), rank, chunk)
    if sched in ("1f1b", "interleaved") and heads != 1:
        sys.exit("FAIL: %s: %d head passes in flight, the schedule runs them back to back"
                 % (sched, heads))
    got = []
    for V in (4096, 8192):
        plan = json.load(open("%s/%s-%s-%d.plan.json" % (work, sched, prec, V)))["ranks"]
        got.append([p["mem_bytes"]["activations"] for p in sorted(plan, key=lambda p: p["pp"])])
    delta = [b - a for a, b in zip(*got)]
    want = [heads * B * T * dV * es if s == rank else 0 for s in range(2)]
    print("%-11s %s: activation bytes per stage %s -> %s, head passes in flight %d, growth %s"
          % (sched, prec, got[0], got[1], heads, delta))
    if delta != want:
        print("FAIL: %s %s: the vocabulary adds %r activation bytes per stage, expected %r "
              "(%d head passes x B x T x dV x %d bytes)" % (sched, prec, delta, want, heads, es))
        bad += 1
sys.exit(1 if bad else 0)
PY
mt_train ref 1 "${common[@]}" --set parallel.pp=1 --set model.vocab_size=8192 \
  --set output.dir="$WORK/ref"
for c in "interleaved 2" "zb-v 2"; do
  read -r sched v <<< "$c"
  args=("${common[@]}" --set parallel.schedule="$sched" --set parallel.virtual_stages="$v"
        --set model.vocab_size=8192 --set output.dir="$WORK/$sched")
  "$MT_BIN/meshtrain" --plan "${args[@]}" --plan-json "$WORK/$sched.plan.json" > /dev/null \
    || fail "plan $sched"
  mt_train "$sched" 2 "${args[@]}"
done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,pp interleaved zb-v \
  || fail "plan and run differ"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/interleaved" "$WORK/zb-v" \
  --rtol 1e-5 --steps 2
echo PASS
