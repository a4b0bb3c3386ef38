#!/usr/bin/env bash
# Mixture-of-Experts load balancing on this machine, and the plans of two
# large MoE shapes.
#   apps/scripts/bench-moe-balance.sh [STEPS]
# 1. Expert load over STEPS (default 200) steps of the tiny MoE (E = 8,
#    top-2, every block; L=2, C=32, T=32; 8 sequences a step, lr 1e-3) on one
#    rank for train.moe_balance = aux (the Switch loss, coefficient 0.01),
#    bias (aux-loss-free, bias rate 0.001) and none: per block the max/mean
#    slots per expert (1 = balanced) at the last step, the mean of each
#    step's max/mean over the last quarter, the max/mean of the slots summed
#    over the last quarter, and the final loss.
# 2. Skew at ep = 2 (dp = 2, 2 ranks x 1 thread, the same model): tokens/s
#    (median over the last half) with balance none (the router collapses
#    onto a few experts) against bias (balanced), measured in the same run,
#    and the busiest ep rank's share of the slots (0.5 = even). Then a
#    forced skew (expert 0's routing bias held at 0.5: every token's first
#    choice) with and without least-loaded expert parallelism
#    (parallel.ep_balance = least-loaded, alpha 1.1): tokens/s, the busiest
#    rank's expert rows over the mean, the rows moved, the final losses.
# 3. meshtrain --plan on 64 LEONARDO nodes (256 GPUs) of a Mixtral-8x7B
#    shape (L=32, C=4096, 32 heads, T=4096, V=32000, 8 experts top-2, expert
#    hidden 21504: our experts are 2-matrix GELU MLPs, Mixtral's 3-matrix
#    SwiGLU of hidden 14336 in parameters; tp=4 x dp=8 x pp=8, sp, ZeRO-1,
#    ep=8) and of a DeepSeek-V3-like shape (L=64 so that pp=8 divides, C=7168,
#    128 heads, T=4096, V=129280, 256 small experts of hidden 2048, top-8,
#    one shared expert, every block MoE; tp=8 inside two nodes is not
#    allowed, so tp=4 x dp=8 x pp=8, sp, ZeRO-1, ep=32 folded over
#    tp x dp), dropless (the dispatch buffers sized for the worst case a
#    rank can receive) and with a capacity factor of 1.25 (buffers bounded
#    by the capacity). Each also with least-loaded expert parallelism: the
#    copies' memory and the most it can add to the ep bytes.
# 4. The virtual device (LEONARDO profile), gpt2-124m with 8 experts top-2,
#    virtual.moe_skew = 1 (Zipf), 3 steps, without and with least-loaded:
#    ep = 4 on 4 ranks (one node), T = 2048, micro-batch 8; ep = 8 on 8
#    ranks (two nodes), T = 1024, micro-batch 4.
# Reports the load (uptime) it ran under: throughput here is noisy.
source "$(dirname "$0")/bench_common.sh" moe-balance
STEPS=${1:-200}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
moe=(--set model.preset=tiny --set model.moe_experts=8 --set model.moe_topk=2
     --set model.moe_every=1 --set data.train=inputs/data/corpus.txt --set train.global_batch=8
     --set train.eval_every=0 --set ckpt.mode=none --set train.threads=1 --set train.log_every=1000
     --set train.moe_bias_rate=0.001 --set train.steps="$STEPS")
echo "load before: $(uptime)"
t0=$(date +%s)
for bal in aux bias none; do
  train_into "$OUT/load_$bal" 1 "${moe[@]}" --set train.micro_batch=8 \
    --set train.moe_balance="$bal"
done
for bal in bias none; do
  train_into "$OUT/skew_$bal" 2 "${moe[@]}" --set parallel.dp=2 --set parallel.ep=2 \
    --set train.micro_batch=4 --set train.moe_balance="$bal"
done
skew=(--set train.moe_balance=bias --set train.moe_bias_rate=0 --set train.moe_bias_init=0.5)
for ll in none least-loaded; do
  train_into "$OUT/forced_$ll" 2 "${moe[@]}" "${skew[@]}" --set parallel.dp=2 \
    --set parallel.ep=2 --set train.micro_batch=4 --set parallel.ep_balance="$ll"
done
echo "load after:  $(uptime) ($(( $(date +%s) - t0 )) s)"
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def recs(d): return [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (out, d))]
def ratio(c): return max(c) / (sum(c) / len(c))
def last_half(d):
    """run d's records, those of the last half of its steps, and their median tokens/s"""
    rs = recs(d)
    h = rs[len(rs) // 2:]
    return rs, h, statistics.median(r["tokens_per_s"] for r in h)
print("\n1. expert load, tiny MoE (E=8, top-2), 1 rank; max/mean per block (1 = balanced)")
print("%-5s %-14s %-22s %-22s %s" % ("", "last step", "per step, last 1/4", "summed, last 1/4", "final loss"))
for bal in ("aux", "bias", "none"):
    rs = recs("load_" + bal)
    q = rs[-max(1, len(rs) // 4):]
    nb = len(rs[0]["moe"]["tokens_per_expert"])
    last = [ratio(rs[-1]["moe"]["tokens_per_expert"][b]) for b in range(nb)]
    per = [statistics.mean(ratio(r["moe"]["tokens_per_expert"][b]) for r in q) for b in range(nb)]
    summed = [ratio([sum(x) for x in zip(*(r["moe"]["tokens_per_expert"][b] for r in q))]) for b in range(nb)]
    f = lambda v: " ".join("%.2f" % x for x in v)
    print("%-5s %-14s %-22s %-22s %.4f" % (bal, f(last), f(per), f(summed), rs[-1]["loss"]))
print("\n2. skew at ep = 2 (dp = 2, 2 ranks x 1 thread), last half of the steps")
base = None
for bal in ("bias", "none"):
    rs, h, tps = last_half("skew_" + bal)
    # experts 0-3 on ep rank 0, 4-7 on ep rank 1; the busier rank's share of the slots
    share = statistics.mean(max(sum(sum(b[:4]) for b in t), sum(sum(b[4:]) for b in t)) /
                            sum(sum(b) for b in t)
                            for t in (r["moe"]["tokens_per_expert"] for r in h))
    base = base or tps
    print("balance %-5s %9.0f tokens/s (%.2fx of bias)  busiest ep rank's share %.3f  final loss %.4f"
          % (bal, tps, tps / base, share, rs[-1]["loss"]))
print("   forced skew (expert 0 first for every token), the same 2 ranks:")
base = None
for ll in ("none", "least-loaded"):
    rs, h, tps = last_half("forced_" + ll)
    base = base or tps
    busy = statistics.mean(statistics.mean(r["moe"]["rows_max_over_mean"]) for r in h)
    moved = statistics.mean(statistics.mean(r["moe"]["moved_frac"]) for r in h)
    print("   ep_balance %-12s %9.0f tokens/s (%.2fx)  busiest rank's rows / mean %.3f  moved %.3f"
          "  final loss %.6f" % (ll, tps, tps / base, busy, moved, rs[-1]["loss"]))
PY
echo
echo "3. meshtrain --plan, 64 LEONARDO nodes (256 GPUs of 64 GB), per rank, the largest stage"
common=(--set metrics.hw=leonardo-booster --set parallel.tp=4 --set parallel.dp=8 --set parallel.pp=8
        --set parallel.sp=true --set parallel.zero=1 --set train.global_batch=256
        --set train.micro_batch=1 --set model.preset=custom --set model.seq_len=4096)
mixtral=(--set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32
         --set model.vocab_size=32000 --set model.moe_experts=8 --set model.moe_topk=2
         --set model.moe_ffn=21504 --set parallel.ep=8)
dsv3=(--set model.n_layer=64 --set model.n_embd=7168 --set model.n_head=128
      --set model.vocab_size=129280 --set model.moe_experts=256 --set model.moe_topk=8
      --set model.moe_ffn=2048 --set model.moe_shared=1 --set parallel.ep=32)
for m in mixtral dsv3 dsv3_cap mixtral_llep dsv3_cap_llep; do
  case $m in
    mixtral) args=("${mixtral[@]}") ;;
    dsv3) args=("${dsv3[@]}") ;;
    dsv3_cap) args=("${dsv3[@]}" --set model.moe_capacity=1.25) ;;
    mixtral_llep) args=("${mixtral[@]}" --set parallel.ep_balance=least-loaded) ;;
    dsv3_cap_llep) args=("${dsv3[@]}" --set model.moe_capacity=1.25 --set parallel.ep_balance=least-loaded) ;;
  esac
  build/bin/meshtrain "${common[@]}" "${args[@]}" --plan --ranks 256 --plan-json "$OUT/plan_$m.json" \
    > "$OUT/plan_$m.txt" 2>&1 || { cat "$OUT/plan_$m.txt"; exit 1; }
  echo "-- $m"
  grep -E "^# (meshtrain plan|MoE|ep, least)" "$OUT/plan_$m.txt"
  python3 - "$OUT/plan_$m.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
# stage, params, grads, optimizer, gathered, activ, comm, total | dp tp pp cp ep etp edp
worst = max(rows, key=lambda r: float(r[7].rstrip("+")))
print("   largest stage %s: %.1f GiB per GPU (params %.1f, grads %.1f, optimizer %.1f, activations %.1f);"
      " per step: ep %.1f GB, edp %.1f GB, tp %.1f GB"
      % (worst[0], float(worst[7].rstrip("+")) / 1024, float(worst[1]) / 1024, float(worst[2]) / 1024,
         float(worst[3]) / 1024, float(worst[5]) / 1024, float(worst[13]) / 1e3, float(worst[15]) / 1e3,
         float(worst[10]) / 1e3))
PY
done
echo
echo "4. the virtual device (leonardo-booster), gpt2-124m, 8 experts top-2, virtual.moe_skew = 1"
virt=(--set model.preset=gpt2-124m --set data.train=inputs/data/corpus.txt --set model.moe_experts=8
      --set model.moe_topk=2 --set train.steps=3 --set train.eval_every=0 --set ckpt.mode=none
      --set train.device=virtual --set train.virtual_hw=leonardo-booster --set virtual.moe_skew=1)
for c in "node 4 --set model.seq_len=2048 --set train.micro_batch=8 --set train.global_batch=32" \
         "nodes2 8 --set model.seq_len=1024 --set train.micro_batch=4 --set train.global_batch=64"; do
  read -r name np args <<< "$c"
  for ll in none least-loaded; do
    # shellcheck disable=SC2086
    "${launcher[@]}" -n "$np" build/bin/meshtrain "${virt[@]}" $args --set parallel.dp="$np" \
      --set parallel.ep="$np" --set parallel.ep_balance="$ll" --set output.dir="$OUT/virt_${name}_$ll" \
      > "$OUT/virt_${name}_$ll.log" 2>&1 || { echo "failed: $OUT/virt_${name}_$ll.log"; exit 1; }
  done
  python3 - "$OUT" "$name" "$np" <<'PY'
import json, sys
out, name, np = sys.argv[1:]
r = {ll: [json.loads(l) for l in open("%s/virt_%s_%s/metrics.jsonl" % (out, name, ll))][-1]
     for ll in ("none", "least-loaded")}
for ll, x in r.items():
    print("   ep %s (%s) %-12s step %.4f s  %9.0f tokens/s (%.2fx)  busiest/mean %.3f  compute %.4f s  ep %.2f GB"
          % (np, name, ll, x["step_s"], x["tokens_per_s"], x["tokens_per_s"] / r["none"]["tokens_per_s"],
             x["moe"]["rows_max_over_mean"][0], x["time_s"]["compute"], x["moe"]["ep_bytes"] / 1e9))
PY
done
