#!/usr/bin/env bash
# Variable-length sequences (data.seq_policy = varlen, issue 38 item 4)
# against packing to T with documents, on a long-tail mix of document
# lengths: log-normal, median e^6 = 403 tokens, sigma 1.2 (90th percentile
# ~1900, 99th ~6600), clipped to [16, 32768]; GPT-2's vocabulary, each
# document opened by <|endoftext|> (50256); documents longer than T cut at
# the windows (data.long_documents = split) under both policies.
#   1. gpt2-124m at T = 4096 on 64 virtual H100 ranks, dp 16 x cp 4 ring
#      (global batch 256: 16 rows per dp rank): per-step flop_imbalance over the dp x cp ranks,
#      padding share, cp bytes and the virtual step's tokens/s; and the
#      same at T = 16384, dp 8 x cp 8 ring (global batch 128).
#   2. the small preset (6 x 384) at T = 1024 on real ranks, on the same mix
#      written with byte ids (vocabulary 256, end-of-text 255, so that the
#      LM head does not dominate the step): cp 2 ring on 2 ranks (a
#      core each), and dp 2 x cp 2 ring on 4 ranks (a core each where the
#      machine has 4; on fewer cores they share them, said in the summary):
#      tokens/s and flop_imbalance.
# Three plans each: packing in sample order, packing with data.balance =
# flops (whole windows over dp), varlen; the same windows for all three.
#   apps/scripts/bench-varlen.sh [BUILD_DIR]     (default: build)
#   PARTS=virtual or PARTS=real runs one of the two (default: both)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
PARTS=${PARTS:-virtual real}
OUT=outputs/bench-varlen
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores" | tee "$OUT/summary.txt"
[ -e "$OUT/longtail.bin" ] || python3 tests/scripts/longtail_corpus.py "$OUT/longtail.bin" 12000000
[ -e "$OUT/longtail256.bin" ] || python3 tests/scripts/longtail_corpus.py "$OUT/longtail256.bin" 2000000 255
C=(--set data.format=u16 --set data.documents=true --set train.eval_every=0
   --set ckpt.mode=none --set train.warmup_steps=1 --set data.long_documents=split)
D=("${C[@]}" --set data.train="$OUT/longtail.bin" --set data.eot=50256)
R=("${C[@]}" --set data.train="$OUT/longtail256.bin" --set data.eot=255)
# virtual64 RUN T DP CP GLOBAL_BATCH ARGS...: gpt2-124m on 64 virtual H100 ranks
virtual64() {
  rm -rf "${OUT:?}/$1"
  mpirun --oversubscribe -n 64 "$BUILD/bin/meshtrain" --set model.preset=gpt2-124m \
    --set model.seq_len="$2" --set parallel.dp="$3" --set parallel.cp="$4" \
    --set train.global_batch="$5" --set train.micro_batch=1 --set train.steps=3 \
    --set train.device=virtual --set train.virtual_hw=h100-sxm "${D[@]}" "${@:6}" \
    --set output.dir="$OUT/$1" > "$OUT/$1.log" 2>&1 || { tail -5 "$OUT/$1.log"; exit 1; }
}
plans=("pack --set data.balance=none" "pack_flops --set data.balance=flops"
       "varlen --set data.seq_policy=varlen")
for p in "${plans[@]}"; do
  read -r name args <<< "$p"
  # shellcheck disable=SC2086
  if [[ $PARTS == *virtual* ]]; then
    virtual64 "virtual64_$name" 4096 16 4 256 $args
    virtual64 "virtual64_16k_$name" 16384 8 8 128 $args
  fi
  [[ $PARTS == *real* ]] || continue
  for np in 2 4; do
    dp=$((np / 2))
    rm -rf "$OUT/real${np}_$name"
    bind=(--bind-to core)
    [ "$cores" -ge "$np" ] || bind=(--oversubscribe --bind-to none)
    # shellcheck disable=SC2086
    mpirun -n $np "${bind[@]}" "$BUILD/bin/meshtrain" --set model.preset=small \
      --set model.seq_len=1024 --set model.vocab_size=256 --set parallel.dp=$dp \
      --set parallel.cp=2 --set train.global_batch=16 --set train.micro_batch=1 \
      --set train.steps=4 --set train.threads=1 "${R[@]}" $args \
      --set output.dir="$OUT/real${np}_$name" > "$OUT/real${np}_$name.log" 2>&1 ||
      { tail -5 "$OUT/real${np}_$name.log"; exit 1; }
  done
done
python3 - "$OUT" "$cores" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out, cores = sys.argv[1], int(sys.argv[2])
def rows(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
setups = (("virtual64", "gpt2-124m T=4096, 64 virtual H100 ranks, dp 16 x cp 4 ring"),
          ("virtual64_16k", "gpt2-124m T=16384, 64 virtual H100 ranks, dp 8 x cp 8 ring"),
          ("real2", "small T=1024, 2 real ranks, cp 2 ring"),
          ("real4", "small T=1024, 4 real ranks, dp 2 x cp 2 ring" +
           ("" if cores >= 4 else f" (sharing {cores} cores)")))
import os
for setup, label in setups:
    if not os.path.exists(f"{out}/{setup}_pack/metrics.jsonl"):
        continue
    print(f"## {label}")
    base = None
    for plan in ("pack", "pack_flops", "varlen"):
        r = rows(f"{setup}_{plan}")
        imb = [x["flop_imbalance"] for x in r]
        tps = [x["tokens_per_s"] for x in r[1:]]  # the first step warms up
        t = sum(tps) / len(tps)
        base = base or t
        pad = sum(x.get("pad_share", 0) for x in r) / len(r)
        cpb = sum(x["cp_bytes"] for x in r[1:]) / len(r[1:])
        cps = sum(x["time_s"]["cp_comm"] for x in r[1:]) / len(r[1:])
        print(f"  {plan:10s}: flop_imbalance mean {sum(imb) / len(imb):.3f} max {max(imb):.3f}; "
              f"tokens/s (steps 2..) {t:.0f} ({t / base:.2f}x packing); padding {pad:.3f}; "
              f"cp bytes/step (rank 0) {cpb / 1e6:.1f} MB, exposed cp {1e3 * cps:.1f} ms")
PY
