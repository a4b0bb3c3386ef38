#!/usr/bin/env bash
# meshplan's search on large cases and the campaigns of the README, timed.
#   apps/scripts/bench-plan.sh [BUILD_DIR]
# 1. A GPT-3 175B shape (96 x 12288, T 2048, batch 1536) on 384 A100s and a
#    1T shape (128 x 25600, T 2048, batch 3072) on 3,072 A100s (the
#    Megatron-LM scaling study's machine, a100-80gb-dgx): the search's wall
#    and CPU seconds as meshplan runs it (the top 10 certain), against the
#    same search pricing every layout that may fit (--all) in the same run,
#    as a ratio; the layouts it enumerated, priced and left unpriced. And a
#    MoE search: GPT-OSS-120B's shape (36 x 2880, 45 heads, 9 key/value
#    heads, 128 SwiGLU experts of 2880, top-4, T 4096, vocabulary 201,088,
#    batch 512) on 64 H100s (h100-sxm).
# 2. The five fastest layouts of gpt2-124m (T 1024, batch 512) on 1 and 16
#    LEONARDO Booster nodes and of a 7B GPT (32 x 4096, T 4096, batch 512)
#    on 16 and 64 nodes, each with its predicted throughput as a ratio of
#    the fastest's.
# Timing figures: no test asserts on them (the machine is shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build}/bin
G175=(--set model.preset=custom --set model.n_layer=96 --set model.n_embd=12288 --set model.n_head=96
      --set model.seq_len=2048 --set model.vocab_size=51200 --set train.global_batch=1536)
G1T=(--set model.preset=custom --set model.n_layer=128 --set model.n_embd=25600 --set model.n_head=160
     --set model.seq_len=2048 --set model.vocab_size=51200 --set train.global_batch=3072)
GOSS=(--set model.preset=custom --set model.arch=llama --set model.n_layer=36 --set model.n_embd=2880
      --set model.n_head=45 --set model.n_kv_head=9 --set model.seq_len=4096
      --set model.vocab_size=201088 --set model.moe_experts=128 --set model.moe_topk=4
      --set model.moe_ffn=2880 --set train.global_batch=512)
G124=(--set model.preset=gpt2-124m --set model.seq_len=1024 --set train.global_batch=512)
G7B=(--set model.preset=custom --set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32
     --set model.seq_len=4096 --set model.vocab_size=50257 --set train.global_batch=512)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timed() { # NAME ARGS...: run meshplan, keep its output, print wall and CPU seconds
  local name=$1; shift
  /usr/bin/time -f "%e %U %S" -o "$tmp/$name.time" "$BIN/meshplan" "$@" > "$tmp/$name.out"
  read -r wall user sys < "$tmp/$name.time"
  echo "$wall $(python3 -c "print('%.2f' % ($user + $sys))")"
}

echo "== search time =="
printf "%-22s %9s %8s | %9s %8s | %6s | %s\n" case "wall s" "cpu s" "--all s" "cpu s" ratio "enumerated / priced"
for c in "175B-384 384 G175 a100-80gb-dgx" "1T-3072 3072 G1T a100-80gb-dgx" \
         "GPT-OSS-120B-64 64 GOSS h100-sxm"; do
  read -r name ranks arr hw <<< "$c"
  declare -n sets=$arr
  read -r w1 c1 < <(timed "$name" "${sets[@]}" --hw "$hw" --ranks "$ranks" --top 10)
  read -r w2 c2 < <(timed "$name-all" "${sets[@]}" --hw "$hw" --ranks "$ranks" --top 10 --all)
  line=$(grep "layouts enumerated" "$tmp/$name.out" | sed 's/^# //')
  printf "%-22s %9s %8s | %9s %8s | %6.2f | %s\n" "$name" "$w1" "$c1" "$w2" "$c2" \
    "$(python3 -c "print($c1 / max($c2, 1e-9))")" "$line"
  sed -n '4,6p' "$tmp/$name.out"
  unset -n sets
done

echo
echo "== top 5 layouts on LEONARDO Booster (leonardo-booster) =="
for c in "gpt2-124m 1 G124" "gpt2-124m 16 G124" "7B 16 G7B" "7B 64 G7B"; do
  read -r name nodes arr <<< "$c"
  declare -n sets=$arr
  "$BIN/meshplan" "${sets[@]}" --hw leonardo-booster --nodes "$nodes" --top 5 > "$tmp/top.out"
  echo "-- $name on $nodes node(s)"
  sed -n '1,4p' "$tmp/top.out" | sed 's/^/   /'
  awk 'NR > 4 && NF > 10' "$tmp/top.out" | python3 -c '
import sys
rows = [l.rstrip("\n") for l in sys.stdin]
best = None
for l in rows:
    tok = float(l.split("|")[1].split()[1])
    best = best or tok
    print("   %s | x%.3f of the fastest" % (l, tok / best))'
  unset -n sets
done
