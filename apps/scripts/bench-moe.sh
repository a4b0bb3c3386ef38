#!/usr/bin/env bash
# Mixture-of-Experts on this machine, and the plan of a Mixtral-shaped model.
#   apps/scripts/bench-moe.sh [REPEATS]
# 1. Throughput: a small MoE (8 experts, top-2, every block; L=4, C=128,
#    T=128, expert hidden 512) on 2 ranks (dp = 2, 1 thread each) at ep = 1
#    and ep = 2, interleaved REPEATS times (default 3): median tokens/s of
#    steps 2..30, and the share of the step in the all-to-alls (ep and etp
#    seconds / step seconds), with the dense model of the same shape as the
#    baseline measured in the same session.
# 2. Expert load: the same MoE on one rank for 200 steps with the Switch
#    load-balancing loss (train.moe_aux_coef = 0.01) and without it (0):
#    max/mean slots per expert (1 = balanced), per block, at steps 1, 50,
#    100, 200 and the mean over steps 101-200.
# 3. meshtrain --plan of a Mixtral-8x7B-shaped model (L=32, C=4096, 32
#    heads, T=4096, V=32000, 8 experts, top-2; expert hidden 21504: our
#    experts are 2-matrix GELU MLPs, so this matches Mixtral's 3-matrix
#    SwiGLU experts of hidden 14336 in parameters) on 64 LEONARDO nodes (256
#    GPUs: tp=4 x dp=8 x pp=8, sp, ZeRO-1, micro-batch 1, global batch 256)
#    at two folded layouts: etp=1 ep=8 edp=4, and etp=4 ep=8 edp=1.
# Reports the load (uptime) it ran under: throughput here is noisy.
source "$(dirname "$0")/bench_common.sh" moe
REPEATS=${1:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
shape=(--set model.preset=custom --set model.n_layer=4 --set model.n_embd=128 --set model.n_head=4
       --set model.seq_len=128 --set train.eval_every=0 --set ckpt.mode=none --set train.threads=1)
moe=(--set model.moe_experts=8 --set model.moe_topk=2 --set model.moe_every=1 --set model.moe_ffn=512)
echo "load before: $(uptime)"
for rep in $(seq 1 "$REPEATS"); do
  for v in dense ep1 ep2; do
    args=("${shape[@]}" --set parallel.dp=2 --set train.global_batch=16 --set train.micro_batch=8
          --set train.steps=30)
    case $v in
      ep1) args+=("${moe[@]}") ;;
      ep2) args+=("${moe[@]}" --set parallel.ep=2) ;;
    esac
    train_into "$OUT/tput_${v}_$rep" 2 "${args[@]}"
  done
done
for aux in 0.01 0; do
  train_into "$OUT/load_aux$aux" 1 "${shape[@]}" "${moe[@]}" --set train.steps=200 \
    --set train.global_batch=8 --set train.micro_batch=8 --set train.moe_aux_coef="$aux"
done
echo "load after:  $(uptime)"
python3 - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def recs(d): return [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (out, d))]
print("\n1. throughput, 2 ranks x 1 thread, dp = 2 (median of %d runs, steps 2-30)" % reps)
print("%-6s %12s %10s %14s %12s" % ("", "tokens/s", "vs dense", "all-to-all", "ep MB/step"))
base = None
for v in ("dense", "ep1", "ep2"):
    tps, share, mb = [], [], []
    for r in range(1, reps + 1):
        rs = recs("tput_%s_%d" % (v, r))[1:]
        tps.append(statistics.median(x["tokens_per_s"] for x in rs))
        if "moe" in rs[0]:
            share.append(statistics.median((x["moe"]["ep_comm_s"] + x["moe"]["etp_comm_s"]) / x["step_s"] for x in rs))
            mb.append(rs[-1]["moe"]["ep_bytes"] / 1e6)
    t = statistics.median(tps)
    base = base or t
    print("%-6s %12.0f %9.2fx %13.1f%% %12s" % (v, t, t / base, 100 * statistics.median(share) if share else 0.0,
                                                "%.2f" % statistics.median(mb) if mb else "-"))
print("\n2. expert load max/mean per block (1 = balanced), 1 rank, 200 steps")
for aux in ("0.01", "0"):
    rs = recs("load_aux" + aux)
    row = lambda i: " ".join("%.2f" % x for x in rs[i]["moe"]["load_max_over_mean"])
    late = [statistics.mean(r["moe"]["load_max_over_mean"][b] for r in rs[100:]) for b in range(len(rs[0]["moe"]["load_max_over_mean"]))]
    print("aux %-5s step 1: %s | 50: %s | 100: %s | 200: %s | mean 101-200: %s | final loss %.4f, aux %.4f"
          % (aux, row(0), row(49), row(99), row(199), " ".join("%.2f" % x for x in late), rs[-1]["loss"], rs[-1]["moe"]["aux_loss"]))
PY
echo
echo "3. meshtrain --plan, Mixtral-8x7B-shaped, 256 LEONARDO GPUs (tp=4 dp=8 pp=8)"
mixtral=(--set model.preset=custom --set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32
         --set model.seq_len=4096 --set model.vocab_size=32000 --set model.moe_experts=8
         --set model.moe_topk=2 --set model.moe_ffn=21504 --set metrics.hw=leonardo-booster
         --set parallel.tp=4 --set parallel.dp=8 --set parallel.pp=8 --set parallel.sp=true
         --set parallel.zero=1 --set train.global_batch=256 --set train.micro_batch=1)
for fold in "1 8" "4 8"; do
  read -r etp ep <<< "$fold"
  build/bin/meshtrain "${mixtral[@]}" --set parallel.etp="$etp" --set parallel.ep="$ep" --plan --ranks 256 \
    --plan-json "$OUT/mixtral_etp${etp}_ep${ep}.json"
done
