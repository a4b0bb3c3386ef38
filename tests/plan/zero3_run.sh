# ZeRO-3's buffers in meshplan are what the run allocates: per bucket (one
# unit each at ZeRO-3: the gradient buffers of the last bucket and two
# shared by the others, each with its fp32 reduce-scatter part) and per
# unit (the gather buffers of the weights' copy), in their dtypes. tiny,
# 2 steps, on 2 and 4 ranks: dp 2 in fp32 and bf16, dp 4 in bf16, tp 2 x
# dp 2 with sp in bf16, and dp 2 in bf16 with bf16 gradients (reduced in
# bf16: bf16 gradient buffers and fp32 accumulation slots). meshplan
# --only's memory by category (the largest rank's) must equal the largest
# rank's allocator peaks in the run's summary.json, byte for byte: the
# gradients, the gathered weights, the parameters (master and copy), the
# optimizer state and the activations (the comm buffers are NCCL's and the
# pipeline's; none here beyond what the run counts: compared too).
source "$(dirname "$0")/../scripts/common.sh"
prof="$WORK/big.ini"
sed 's/^mem_gib = .*/mem_gib = 64/' "$MT_SRC/tests/plan/cost-test.ini" > "$prof"
corpus=$(mt_corpus 400000)
common=(--set model.preset=tiny --set train.steps=2 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
        --set plan.headroom=0 --set parallel.zero=3)
b16=(--set train.precision=bf16)
cases=("dp2 2 --set parallel.dp=2 --set train.micro_batch=2"
       "dp2b 2 --set parallel.dp=2 --set train.micro_batch=2 ${b16[*]}"
       "dp4b 4 --set parallel.dp=4 --set train.micro_batch=1 ${b16[*]}"
       "tp2dp2b 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=2 ${b16[*]}"
       "dp2g16 2 --set parallel.dp=2 --set train.micro_batch=2 ${b16[*]} --set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16")
for c in "${cases[@]}"; do
  read -r name np settings <<< "$c"
  # shellcheck disable=SC2086
  mt_train "$name" "$np" "${common[@]}" $settings --set output.dir="$WORK/$name"
  # shellcheck disable=SC2086
  "$MT_BIN/meshplan" "${common[@]}" $settings --hw "$prof" --only > "$WORK/$name.json" \
    || fail "meshplan $name"
done
python3 - "$WORK" "${cases[@]}" <<'PY'
import json, sys
work = sys.argv[1]
for case in sys.argv[2:]:
    name = case.split()[0]
    got = json.load(open("%s/%s.json" % (work, name)))["mem"]
    ranks = json.load(open("%s/%s/summary.json" % (work, name)))["ranks"]
    for cat in ("grads", "gathered", "params", "optimizer", "activations", "comm"):
        want = max(r["mem_peak_bytes"][cat] for r in ranks)
        if not got[cat] == want:
            sys.exit("FAIL: %s %s: meshplan %r bytes, the run allocated %r" % (name, cat, got[cat], want))
    print("%-8s grads %8d gathered %7d params %8d optimizer %8d (meshplan = run)" % (
        name, got["grads"], got["gathered"], got["params"], got["optimizer"]))
PY
echo PASS
