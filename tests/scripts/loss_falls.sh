# On the default corpus the loss falls by at least 30% (first step to the
# mean of the last five), and the validation loss falls with it.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 1000000)
mt_mpirun 2 "$MT_BIN/meshtrain" "$MT_SRC/inputs/default.ini" --set model.preset=tiny \
  --set model.seq_len=64 --set train.steps=150 --set train.global_batch=16 \
  --set train.micro_batch=8 --set parallel.dp=2 --set train.lr=3e-3 --set train.eval_every=50 \
  --set data.train="$corpus" --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 \
  || { cat "$WORK/run.log"; fail "training failed"; }
tail -3 "$WORK/run.log"
python3 - "$WORK/run" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import finite, same_bits
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
first, last5 = recs[0]["loss"], sum(r["loss"] for r in recs[-5:]) / 5
vals = [r["val_loss"] for r in recs if "val_loss" in r]
print("loss %.4f -> %.4f (%.1f%% lower), val %s" % (first, last5, 100 * (1 - last5 / first), vals))
assert len(recs) == 150, "expected 150 records"
assert all(finite(r["loss"]) for r in recs), "a loss is not a finite number"
assert last5 <= 0.7 * first, "loss fell by less than 30%"
assert len(vals) == 3 and vals[-1] < vals[0], "validation loss did not fall"
for k in ("tokens_per_s", "mfu", "grad_norm", "lr", "time_s", "mem_peak_bytes", "model_flops"):
    assert k in recs[-1], "metrics line lacks " + k
s = json.load(open(sys.argv[1] + "/summary.json"))
assert same_bits(s["final_loss"], recs[-1]["loss"]), "final_loss is not the last step's loss"
PY
