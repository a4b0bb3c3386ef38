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
# run NAME RECOMPUTE
run() { mt_train "$1" "$PP" "${common[@]}" --set output.dir="$WORK/$1" --set train.recompute="$2"; }
run stored false
run recomputed true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/stored" "$WORK/recomputed" --bitwise --steps 10
python3 - "$WORK/stored" "$WORK/recomputed" "$PP" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import records, same_bits
ref, cur, pp = records(sys.argv[1]), records(sys.argv[2]), int(sys.argv[3])
if len(ref) != len(cur):
    sys.exit("FAIL: %d steps stored, %d recomputed" % (len(ref), len(cur)))
for a, b in zip(ref, cur):
    for k in ("grad_norm", "val_loss"):
        if (k in a) != (k in b) or (k in a and not same_bits(a[k], b[k])):  # null never equal
            sys.exit("FAIL: step %d %s differs: %r vs %r" % (a["step"], k, b.get(k), a.get(k)))
def mem(r):
    return r["pp"]["act_peak_bytes"] if pp > 1 else [r["mem_peak_bytes"]["activations"]]
m0, m1 = mem(ref[-1]), mem(cur[-1])
print("peak activation bytes per stage: stored %s, recomputed %s" % (m0, m1))
if not all(y < x for x, y in zip(m0, m1)):
    sys.exit("FAIL: recomputation does not lower the peak activation memory")
print("ok   bitwise equal losses, grad_norm and val_loss")
PY
