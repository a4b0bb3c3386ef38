#!/usr/bin/env bash
# Windows with documents balanced over dp by their FLOPs (data.balance =
# flops) against sample order (issue 38), on a long-tail mix of document
# lengths: log-normal, median e^6 = 403 tokens, sigma 1.2 (90th percentile
# ~1900, 99th ~6600), clipped to [16, 32768]; GPT-2's vocabulary, each
# document opened by <|endoftext|> (50256).
#   1. gpt2-124m at T = 4096 (the attention's share ~43% of a full window's
#      FLOPs) on 64 virtual H100 ranks (dp 64, global batch 256): the
#      per-step flop_imbalance over the ranks, both plans (the virtual
#      device prices attention as packed windows, so its step times do not
#      show the gain; the imbalance is the data's, computed as a run does).
#   2. the small preset at T = 1024 on 2 real ranks (dp 2, a core each):
#      tokens/s and flop_imbalance, both plans, in one invocation.
#   apps/scripts/bench-balance.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
OUT=outputs/bench-balance
rm -rf "$OUT"
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores" | tee "$OUT/summary.txt"
python3 tests/scripts/longtail_corpus.py "$OUT/longtail.bin" 12000000
D=(--set data.train="$OUT/longtail.bin" --set data.format=u16 --set data.documents=true
   --set data.eot=50256 --set train.eval_every=0 --set ckpt.mode=none --set train.warmup_steps=1)
for plan in none flops; do
  mpirun --oversubscribe -n 64 "$BUILD/bin/meshtrain" --set model.preset=gpt2-124m \
    --set model.seq_len=4096 --set parallel.dp=64 --set train.global_batch=256 \
    --set train.micro_batch=1 --set train.steps=4 --set train.device=virtual \
    --set train.virtual_hw=h100-sxm "${D[@]}" --set data.balance=$plan \
    --set output.dir="$OUT/virtual64_$plan" > "$OUT/virtual64_$plan.log" 2>&1 ||
    { tail -5 "$OUT/virtual64_$plan.log"; exit 1; }
  mpirun -n 2 --bind-to core "$BUILD/bin/meshtrain" --set model.preset=small \
    --set model.seq_len=1024 --set model.vocab_size=50257 --set parallel.dp=2 \
    --set train.global_batch=8 --set train.micro_batch=1 --set train.steps=5 "${D[@]}" \
    --set data.balance=$plan --set output.dir="$OUT/real2_$plan" > "$OUT/real2_$plan.log" 2>&1 ||
    { tail -5 "$OUT/real2_$plan.log"; exit 1; }
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
def rows(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
for setup, label in (("virtual64", "gpt2-124m T=4096, 64 virtual H100 ranks"),
                     ("real2", "small T=1024, 2 real ranks")):
    print(f"## {label}")
    for plan in ("none", "flops"):
        r = rows(f"{setup}_{plan}")
        imb = [x["flop_imbalance"] for x in r]
        tps = [x["tokens_per_s"] for x in r[1:]]  # the first step warms up
        print(f"  data.balance = {plan:5s}: flop_imbalance mean {sum(imb) / len(imb):.3f} "
              f"max {max(imb):.3f}; tokens/s (steps 2..) {sum(tps) / len(tps):.0f}")
PY
