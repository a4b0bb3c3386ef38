# Synthetic tokens (issue 44 item 2): the virtual device needs no token
# file. From a directory without inputs/data/corpus.txt, gpt2-124m at T =
# 1024 and a global batch of 512 emulates on 4 virtual ranks with data.train
# left at its default (it says so: synthetic tokens); data.train = synthetic
# trains on the CPU, its tokens a function of (seed, sample): dp 1 and dp 2
# give the same losses (relative 1e-5) and the same data_hash. A missing
# token file's error says how to make one.
source "$(dirname "$0")/../scripts/common.sh"
mkdir -p "$WORK/empty"
( cd "$WORK/empty" &&
  mt_mpirun 4 "$MT_BIN/meshtrain" --set model.preset=gpt2-124m --set parallel.dp=4 \
    --set train.global_batch=512 --set train.micro_batch=8 --set train.steps=2 \
    --set train.device=virtual --set train.virtual_hw=h100-sxm --set ckpt.mode=none \
    --set output.dir="$WORK/virtual" > "$WORK/virtual.log" 2>&1 ) ||
  { cat "$WORK/virtual.log"; fail "the virtual device without a token file"; }
grep -q "data: synthetic tokens below the vocabulary of 50257 (the virtual device" "$WORK/virtual.log" ||
  { cat "$WORK/virtual.log"; fail "the virtual run does not say its tokens are synthetic"; }
[ "$(wc -l < "$WORK/virtual/metrics.jsonl")" = 2 ] || fail "the virtual run did not take 2 steps"
echo "ok   the virtual device emulates gpt2-124m at a global batch of 512 without a token file"
S=(--set model.preset=tiny --set data.train=synthetic --set train.steps=4 --set train.global_batch=8
   --set train.eval_every=2 --set train.eval_batches=1 --set ckpt.mode=none
   --set data.hash_batches=true)
mt_train dp1 1 "${S[@]}" --set train.micro_batch=8 --set output.dir="$WORK/dp1"
mt_train dp2 2 "${S[@]}" --set parallel.dp=2 --set train.micro_batch=2 --set output.dir="$WORK/dp2"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/dp1" "$WORK/dp2" --rtol 1e-5 --steps 4
python3 - "$WORK" <<'PY'
import json, sys
h = [[json.loads(l)["data_hash"] for l in open(f"{sys.argv[1]}/{r}/metrics.jsonl")] for r in ("dp1", "dp2")]
assert h[0] == h[1] and len(set(h[0])) == 4, h
print("ok   synthetic tokens: the same windows at dp 1 and 2, other ones each step")
PY
set +e
"$MT_BIN/meshtrain" --set model.preset=tiny --set data.train="$WORK/none.bin" > /dev/null 2> "$WORK/missing.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "none.bin: cannot open: No such file or directory (meshdata corpus PATH writes a corpus" \
  "$WORK/missing.err" || { cat "$WORK/missing.err"; fail "a missing token file: rc $rc"; }
echo "ok   a missing token file says how to make one"
echo PASS
