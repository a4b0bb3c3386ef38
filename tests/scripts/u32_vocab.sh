# Vocabularies beyond uint16: token ids above 65,535 written by
# `meshdata encode --from ids --format u32` train tiny with vocab_size 70000
# (loss finite and falling, validation loss finite); the uint16 formats refuse
# those ids with one line, and meshdata info reports the true largest id.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
# the corpus' bytes (10..121) as ids 65,706..67,593: the same text, ids that need 17 bits
od -An -v -tu1 "$corpus" | awk '{for (i = 1; i <= NF; i++) print 65536 + 17 * $i}' > "$WORK/ids.txt"
"$MT_BIN/meshdata" encode "$WORK/ids.txt" "$WORK/train.bin" --from ids --format u32 \
  || fail "meshdata encode --format u32 failed"
"$MT_BIN/meshdata" info "$WORK/train.bin" --format u32 > "$WORK/info.txt"
grep -q "^max token id: 67593 " "$WORK/info.txt" || { cat "$WORK/info.txt"; fail "info: wrong largest id"; }
for fmt in u16 llmc; do
  set +e
  "$MT_BIN/meshdata" encode "$WORK/ids.txt" "$WORK/narrow.bin" --from ids --format $fmt 2> "$WORK/err.txt"
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "--format $fmt accepted id 67,5xx"
  [ "$(wc -l < "$WORK/err.txt")" -eq 1 ] && grep -q "token id 6[0-9]* (token 0) does not fit format $fmt" "$WORK/err.txt" \
    || { cat "$WORK/err.txt"; fail "--format $fmt: not the one expected line"; }
  [ ! -e "$WORK/narrow.bin" ] && [ ! -e "$WORK/narrow.bin.tmp" ] || fail "--format $fmt left a file"
done
mt_mpirun 2 "$MT_BIN/meshtrain" --set model.preset=tiny --set model.vocab_size=70000 \
  --set data.train="$WORK/train.bin" --set data.format=u32 --set train.steps=8 \
  --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=2 --set train.lr=3e-3 \
  --set train.warmup_steps=2 --set train.eval_every=4 --set train.eval_batches=1 \
  --set ckpt.mode=none --set output.dir="$WORK/run" > "$WORK/run.log" 2>&1 \
  || { cat "$WORK/run.log"; fail "training on uint32 tokens failed"; }
grep -q "V=70000" "$WORK/run.log" || { cat "$WORK/run.log"; fail "the run did not use vocab 70000"; }
python3 - "$WORK/run" <<'PY'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
loss = [r["loss"] for r in recs]
vals = [r["val_loss"] for r in recs if "val_loss" in r]
assert len(loss) == 8, "expected 8 steps, got %d" % len(loss)
assert all(isinstance(x, float) and math.isfinite(x) for x in loss + vals), "non-finite loss %s %s" % (loss, vals)
# it starts near ln(70000) = 11.16 (uniform over the whole vocabulary) and falls
assert abs(loss[0] - math.log(70000)) < 0.5, "first loss %.4f, expected about ln 70000" % loss[0]
assert loss[-1] < loss[0] - 0.2, "loss did not fall: %s" % loss
assert len(vals) == 2 and vals[1] < vals[0], "validation loss %s" % vals
print("PASS: vocab 70000 from uint32 tokens: loss %.4f -> %.4f, val %s" % (loss[0], loss[-1], vals))
PY
