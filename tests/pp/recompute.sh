# recompute.sh PP SCHEDULE MICRO_BATCH
# Activation recomputation changes memory and nothing else: tiny with 4
# layers, global batch 8, the same layout with train.recompute = true and
# false gives bitwise the same loss and gradient norm at every one of 10
# steps, and holds less activation memory (pp = 1: the activations category
# of mem_peak_bytes; pp > 1: every stage's pp.act_peak_bytes). Prints both.
PP=$1; SCHED=$2; MB=$3
MT_NAME=pp_recompute; MT_SUFFIX=pp${PP}_${SCHED}
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=10
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=5
        --set train.eval_batches=1 --set train.warmup_steps=5 --set train.lr=3e-3
        --set ckpt.mode=none --set parallel.pp="$PP" --set parallel.schedule="$SCHED"
        --set train.micro_batch="$MB")
run() { # NAME RECOMPUTE
  mt_mpirun "$PP" "$MT_BIN/meshtrain" "${common[@]}" --set output.dir="$WORK/$1" \
    --set train.recompute="$2" > "$WORK/$1.log" 2>&1 || { cat "$WORK/$1.log"; fail "run $1 failed"; }
}
run stored false
run recomputed true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/stored" "$WORK/recomputed" --bitwise --steps 10
python3 - "$WORK/stored" "$WORK/recomputed" "$PP" <<'PY'
import json, re, sys
def lines(d): return open(d + "/metrics.jsonl").read().splitlines()
def field(line, k):
    m = re.search('"%s":([^,}]*)' % k, line)
    return m and m.group(1)
ref, cur, pp = lines(sys.argv[1]), lines(sys.argv[2]), int(sys.argv[3])
for a, b in zip(ref, cur):
    for k in ("grad_norm", "val_loss"):
        if field(a, k) != field(b, k):
            sys.exit("FAIL: %s differs: %s vs %s" % (k, field(b, k), field(a, k)))
def mem(line):
    r = json.loads(line)
    return r["pp"]["act_peak_bytes"] if pp > 1 else [r["mem_peak_bytes"]["activations"]]
m0, m1 = mem(ref[-1]), mem(cur[-1])
print("peak activation bytes per stage: stored %s, recomputed %s" % (m0, m1))
if not all(y < x for x, y in zip(m0, m1)):
    sys.exit("FAIL: recomputation does not lower the peak activation memory")
print("ok   bitwise equal losses, grad_norm and val_loss")
PY
