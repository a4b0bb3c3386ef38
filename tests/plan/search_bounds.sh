# The search's pruning is sound: pricing every layout that may fit (--all),
# no layout's step-time or memory lower bound exceeds its exact price (the
# search counts those it priced above a bound: 0), and the ten fastest
# layouts are the same, row for row, as the search that stops once they
# are certain. tiny, small and tiny MoE on 8 ranks of the test profile, a
# 1.3B GPT on 32 A100s (where the memory bound prunes and the step-time
# bound leaves most layouts unpriced), and a SwiGLU MoE with grouped-query
# attention (16 experts, top-4, bf16) on 8 H100s, whose bounds count the
# routed experts' matmuls, elementwise work and activations
# (tests/unit/test_plan_moe.c holds more MoE shapes to the same); and a
# MoE whose experts are most of its memory (16 experts of 4,096 hidden
# units on C = 128), where an interleaved stage of one-layer chunks at
# even pp holds two layers of one parity: ZeRO-3 gives the two their own
# gather and gradient buffers (by their place on the rank; by the layer's
# own parity they shared one, and 39 layouts were priced below the memory
# bound).
source "$(dirname "$0")/../scripts/common.sh"
G13=(--set model.preset=custom --set model.n_layer=24 --set model.n_embd=2048 --set model.n_head=16
     --set model.seq_len=2048 --set model.vocab_size=51200 --set train.global_batch=256)
MOE=(--set model.preset=custom --set model.arch=llama --set model.n_layer=4 --set model.n_embd=128
     --set model.n_head=4 --set model.n_kv_head=2 --set model.seq_len=2048 --set model.vocab_size=512
     --set model.moe_experts=16 --set model.moe_topk=4 --set model.moe_ffn=64
     --set train.global_batch=32 --set train.precision=bf16)
WIDE=(--set model.preset=custom --set model.arch=llama --set model.n_layer=4 --set model.n_embd=128
      --set model.n_head=4 --set model.n_kv_head=2 --set model.seq_len=512 --set model.vocab_size=512
      --set model.moe_experts=16 --set model.moe_topk=2 --set model.moe_ffn=4096
      --set train.global_batch=32 --set train.precision=bf16)
cases=("tiny 8 cost --set model.preset=tiny --set train.global_batch=16"
       "small 8 cost --set model.preset=small --set train.global_batch=16"
       "moe 8 cost --set model.preset=tiny --set model.moe_experts=4 --set model.moe_topk=2 --set train.global_batch=16"
       "g13 32 a100 ${G13[*]}"
       "moe_swiglu 8 h100 ${MOE[*]}"
       "moe_wide 8 h100 ${WIDE[*]}")
for c in "${cases[@]}"; do
  read -r name ranks hw settings <<< "$c"
  prof=$MT_SRC/tests/plan/cost-test.ini
  [ "$hw" = a100 ] && prof=a100-80gb-dgx
  [ "$hw" = h100 ] && prof=h100-sxm
  for mode in all top; do
    extra=()
    [ $mode = all ] && extra=(--all)
    # shellcheck disable=SC2086
    "$MT_BIN/meshplan" $settings --hw "$prof" --ranks "$ranks" --top 10 "${extra[@]}" \
      > "$WORK/$name.$mode.out" || fail "meshplan $name $mode"
  done
  summary=$(sed -n 3p "$WORK/$name.all.out")
  echo "$name: $summary"
  over=$(sed -n 's/.*; \([0-9]*\) priced above a lower bound$/\1/p' <<< "$summary")
  [ "$over" = 0 ] || fail "$name: $over layouts priced above a lower bound ($summary)"
  # the table: the rows after the header, the ten fastest
  diff <(awk 'NR > 4 && NF > 10' "$WORK/$name.all.out" | head -10) \
       <(awk 'NR > 4 && NF > 10' "$WORK/$name.top.out" | head -10) \
    || fail "$name: the top 10 differ with and without the step-time pruning"
  [ "$(awk 'NR > 4 && NF > 10' "$WORK/$name.top.out" | head -10 | wc -l)" = 10 ] \
    || fail "$name: fewer than 10 layouts ranked"
  unpriced=$(sed -n 's/.*, \([0-9]*\) left unpriced.*/\1/p' "$WORK/$name.top.out" | head -1)
  echo "$name: $unpriced left unpriced by the step-time bound in the pruned search"
done
echo PASS
