# The pipeline executor under AddressSanitizer/UBSan (label "sanitize": the
# test command runs it in the ASan build too): tiny with 4 layers, 3 steps, on
# 2 stages with the split backward of zb-h1 plus recomputation, and with the
# interleaved schedule (2 chunks per rank) plus dp = 2, and zb-v (the V's
# turn, the embedding and the head on rank 0, its evaluation), and token
# slices (1f1b, 4 slices, ZeRO-3 with dp 2: the key/value caches);
# all give the single-rank losses (relative 1e-5) and validation loss.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 100000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=3
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=3
        --set train.eval_batches=1 --set ckpt.mode=none)
run() { # NAME NP ARGS...
  local name=$1
  mt_train "$name" "$2" "${common[@]}" --set output.dir="$WORK/$name" "${@:3}"
  ! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: sanitizer report"; }
}
run ref 1 --set train.micro_batch=8
run zbh1 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=true \
  --set train.micro_batch=2
run interleaved 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=1
run zbv 2 --set parallel.pp=2 --set parallel.schedule=zb-v --set parallel.virtual_stages=2 \
  --set train.micro_batch=2
run slices 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=3 \
  --set parallel.pp_token_slices=4 --set train.micro_batch=2
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/zbh1" "$WORK/interleaved" \
  "$WORK/zbv" "$WORK/slices" --rtol 1e-5 --steps 3
echo "PASS: pp = 2 (zb-h1 + recompute; interleaved x dp 2; zb-v; slices) gives the single-rank losses"
