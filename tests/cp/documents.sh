# Documents (data.documents = true): a packed batch gives the loss and the
# gradients of its documents run one by one, for learned and rotary
# positions, at cp = 1 and cp = 2 ring and Ulysses (doc_check.c); and
# meshtrain with documents (each line of the text corpus one, data.eot =
# the newline) trains the same losses at cp = 1, cp = 2 ring and Ulysses and
# pp = 2, gpt2 and llama, within a relative 1e-5 over 10 steps and their
# validation losses; bf16 runs with documents at cp = 2; and the losses
# differ from the same run without documents.
source "$(dirname "$0")/../scripts/common.sh"
mt_test_program doc_check 2
corpus=$(mt_corpus 200000)
common=(--set train.steps=10 --set train.global_batch=8 --set train.micro_batch=2
        --set data.train="$corpus" --set train.eval_every=5 --set train.eval_batches=1
        --set ckpt.mode=none --set train.lr=3e-3 --set data.documents=true --set data.eot=10)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
for preset in tiny tiny-llama; do
  p=(--set model.preset=$preset)
  run ${preset}_ref 1 "${p[@]}"
  run ${preset}_ring 2 "${p[@]}" --set parallel.cp=2
  run ${preset}_ulysses 2 "${p[@]}" --set parallel.cp=2 --set parallel.cp_mode=ulysses
  run ${preset}_pp2 2 "${p[@]}" --set parallel.pp=2
  python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/${preset}_ref" "$WORK/${preset}_ring" \
    "$WORK/${preset}_ulysses" "$WORK/${preset}_pp2" --rtol 1e-5 --steps 10
done
run plain 1 --set model.preset=tiny --set data.documents=false
run bf16_ring 2 --set model.preset=tiny-llama --set parallel.cp=2 --set train.precision=bf16
python3 - "$WORK" <<'PY'
import json, math, sys
sys.path.insert(0, __import__("os").environ["MT_SRC"] + "/tests/scripts")
from mt_numbers import within
w = sys.argv[1]
def rows(run):
    return [json.loads(l) for l in open(f"{w}/{run}/metrics.jsonl")]
def losses(run):
    return [r["loss"] for r in rows(run) if "loss" in r]
def val(run):
    return [r["val_loss"] for r in rows(run) if "val_loss" in r]
for preset in ("tiny", "tiny-llama"):
    ref = val(f"{preset}_ref")
    if len(ref) != 2:
        sys.exit(f"FAIL: {preset}: {len(ref)} validation losses, expected 2")
    for other in ("ring", "ulysses", "pp2"):
        got = val(f"{preset}_{other}")
        if len(got) != 2 or not all(within(a, b, 1e-5) for a, b in zip(got, ref)):
            sys.exit(f"FAIL: {preset} {other}: validation losses {got} vs {ref}")
print("ok   validation losses of cp = 2 ring, Ulysses and pp = 2 within 1e-5 of one rank's")
docs, plain = losses("tiny_ref"), losses("plain")
diff = max(abs(a - b) for a, b in zip(docs, plain))
if len(docs) != 10 or len(plain) != 10 or not diff > 1e-4:
    sys.exit(f"FAIL: the losses with documents {docs} are those without {plain}")
print(f"ok   documents change the losses (by up to {diff:.1e} over 10 steps)")
b = losses("bf16_ring")
if len(b) != 10 or not all(math.isfinite(x) for x in b) or not b[-1] < b[0]:
    sys.exit(f"FAIL: bf16 with documents at cp = 2: losses {b}")
print(f"ok   bf16 with documents at cp = 2 ring trains: {b[0]:.4f} -> {b[-1]:.4f}")
PY
echo PASS
