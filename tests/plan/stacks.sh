# meshplan --stack NAME (lib/plan/stacks.c): each preset prices exactly
# what its flags price (--only, the whole JSON line: step_s to 17 digits,
# memory by category, every part), the flags written out here as
# docs/planner.md's table states them, its --compute-efficiency included;
# the preset names in --help are exactly those; meshtrain (the default)
# equals no --stack, also on a profile that sets attention and collectives
# itself and under train.precision = bf16; a flag given beside --stack
# overrides the preset's value, before or after it; on an fp32 profile
# every preset but meshtrain changes the price (a --stack that was ignored
# would fail the first check); the search's header names the stack. The
# compute efficiency is applied once, to the matmul and attention rates
# alone: --compute-efficiency 0.5 prices exactly as the profile with its
# gemm curve and attn_gflops halved (block and materialized attention),
# and not as the profile. gpt2-124m on 16 ranks of a100-80gb-dgx (two
# nodes, so flat and hierarchical collectives differ) and of the same
# profile without act_bytes = 2 (fp32 by default). A search under a stack
# ranks only the layouts the stack could run.
source "$(dirname "$0")/../scripts/common.sh"
MIXED="--dtype weights=2 --dtype master=4 --dtype grads=4 --dtype moments=4 --dtype acts=2 --dtype msg=2"
EFF="--compute-efficiency"
declare -A FLAGS=(
  [meshtrain]=""
  [megatron-2021]="--attention materialized --collectives hierarchical $MIXED --dtype grad_reduce=4 $EFF 0.8298"
  [megatron-deepspeed]="--attention materialized --collectives hierarchical $MIXED --dtype grad_reduce=4 $EFF 0.7122"
  [deepspeed-zero3]="--attention materialized --collectives flat $MIXED --dtype grad_reduce=2 $EFF 0.6231"
  [megatron-core]="--attention block --collectives hierarchical $MIXED --dtype grad_reduce=4 $EFF 0.7757"
  [fsdp]="--attention block --collectives hierarchical $MIXED --dtype grad_reduce=4 $EFF 0.9089"
  [llm.c]="--attention block --collectives hierarchical $MIXED --dtype grads=2 --dtype grad_reduce=2 $EFF 0.8177"
)
model=(--set model.preset=gpt2-124m --set train.global_batch=64 --set train.micro_batch=2)
layouts=("z3 --set parallel.tp=2 --set parallel.dp=8 --set parallel.zero=3"
         "pp --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1")

sed '/^act_bytes/d' "$MT_SRC/inputs/hw/a100-80gb-dgx.ini" > "$WORK/fp32.ini"
# the matmul curve and the fused attention rate at half the profile's
sed -e 's/^gemm = .*/gemm = 1e8:10000 1e9:45000 1e10:95000 1e11:125000 1e12:135000/' \
    -e 's/^attn_gflops = .*/attn_gflops = 85000/' "$MT_SRC/inputs/hw/a100-80gb-dgx.ini" > "$WORK/half.ini"
grep -q '^gemm = 1e8:20000 1e9:90000 1e10:190000 1e11:250000 1e12:270000$' \
  "$MT_SRC/inputs/hw/a100-80gb-dgx.ini" && grep -q '^attn_gflops = 170000$' \
  "$MT_SRC/inputs/hw/a100-80gb-dgx.ini" || fail "a100-80gb-dgx's curve changed: update half.ini"
hw=a100-80gb-dgx
# price NAME ARGS...: the --only JSON line into $WORK/NAME.json, on $hw
price() {
  local name=$1; shift
  mt_guard "$MT_BIN/meshplan" "${model[@]}" --hw "$hw" --only "$@" > "$WORK/$name.json" \
    || fail "meshplan $* exited $?"
  grep -q '"step_s"' "$WORK/$name.json" || fail "meshplan $*: no figures"
}
same() { cmp -s "$WORK/$1.json" "$WORK/$2.json" || fail "$3: $(cat "$WORK/$1.json") != $(cat "$WORK/$2.json")"; }
differ() { ! cmp -s "$WORK/$1.json" "$WORK/$2.json" || fail "$3: both price $(cat "$WORK/$1.json")"; }

# the names --help lists are the ones stated here
listed=$("$MT_BIN/meshplan" --help | awk '/^The presets|presets \(docs/ {on=1; next} on && /^  [^ ]/ {print $1}' | sort | tr '\n' ' ')
stated=$(printf '%s\n' "${!FLAGS[@]}" | sort | tr '\n' ' ')
[ "$listed" = "$stated" ] || fail "--help lists the presets '$listed', the test states '$stated'"

for c in "${layouts[@]}" "fp32 ${layouts[0]#* }"; do
  read -r lay args <<< "$c"
  [ "$lay" = fp32 ] && hw="$WORK/fp32.ini"
  # shellcheck disable=SC2086
  price "$lay-none" $args
  for s in "${!FLAGS[@]}"; do
    # shellcheck disable=SC2086
    price "$lay-stack-$s" $args --stack "$s"
    # shellcheck disable=SC2086
    price "$lay-flags-$s" $args ${FLAGS[$s]}
    same "$lay-stack-$s" "$lay-flags-$s" "$lay: --stack $s against its flags"
    [ "$s" = meshtrain ] || [ "$lay" != fp32 ] || differ "$lay-stack-$s" "$lay-none" "$lay: --stack $s changes nothing"
    echo "$lay $s: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("step_s", d["step_s"], "mem_bytes", d["mem_bytes"])' "$WORK/$lay-stack-$s.json")"
  done
  same "$lay-stack-meshtrain" "$lay-none" "$lay: the default against --stack meshtrain"
  # a flag beside the preset wins, given before or after --stack
  # shellcheck disable=SC2086
  price "$lay-over1" $args --stack deepspeed-zero3 --collectives hierarchical --dtype grad_reduce=4 \
    $EFF 0.8298
  same "$lay-over1" "$lay-flags-megatron-2021" "$lay: deepspeed-zero3 with hierarchical collectives and fp32 reductions"
  # shellcheck disable=SC2086
  price "$lay-over2" $args --attention block $EFF 0.7757 --stack megatron-2021
  same "$lay-over2" "$lay-flags-megatron-core" "$lay: --attention block $EFF 0.7757 --stack megatron-2021"
  differ "$lay-over2" "$lay-stack-megatron-2021" "$lay: --attention block beside --stack megatron-2021 ignored"
  # shellcheck disable=SC2086
  price "$lay-over3" $args --stack megatron-2021 $EFF 0.7122
  same "$lay-over3" "$lay-flags-megatron-deepspeed" "$lay: megatron-2021 at megatron-deepspeed's efficiency"
done

# the efficiency scales the matmul and attention rates, once: as a profile
# whose rates are halved, under either attention; the default is 1
read -r lay args <<< "${layouts[0]}"
for att in block materialized; do
  hw=a100-80gb-dgx
  # shellcheck disable=SC2086
  price "eff-half-$att" $args --attention $att $EFF 0.5
  # shellcheck disable=SC2086
  price "eff-one-$att" $args --attention $att $EFF 1
  # shellcheck disable=SC2086
  price "eff-none-$att" $args --attention $att
  hw="$WORK/half.ini"
  # shellcheck disable=SC2086
  price "eff-profile-$att" $args --attention $att
  same "eff-half-$att" "eff-profile-$att" "$att: $EFF 0.5 against the halved profile"
  same "eff-one-$att" "eff-none-$att" "$att: $EFF 1 against none"
  differ "eff-half-$att" "eff-none-$att" "$att: $EFF 0.5 ignored"
  # slower kernels, more compute time; less than twice (elementwise work keeps its rate)
  python3 -c 'import json, sys
h, n = (json.load(open(f))["compute_s"] for f in sys.argv[1:])
assert n < h < 2 * n, (h, n)' "$WORK/eff-half-$att.json" "$WORK/eff-none-$att.json" \
    || fail "$att: compute_s at efficiency 0.5 not within (1, 2) x the default's"
done
hw=a100-80gb-dgx

# meshtrain leaves a profile's own attention and collectives keys, and the
# configuration's precision, as they are
{ cat "$MT_SRC/inputs/hw/a100-80gb-dgx.ini"; printf 'attention = materialized\ncollectives = flat\n'; } \
  > "$WORK/keys.ini"
read -r lay args <<< "${layouts[0]}"
hw=a100-80gb-dgx
for prec in fp32 bf16; do
  # shellcheck disable=SC2086
  mt_guard "$MT_BIN/meshplan" "${model[@]}" $args --set train.precision=$prec --hw "$WORK/keys.ini" \
    --only > "$WORK/keys-none-$prec.json" || fail "meshplan on keys.ini"
  # shellcheck disable=SC2086
  mt_guard "$MT_BIN/meshplan" "${model[@]}" $args --set train.precision=$prec --hw "$WORK/keys.ini" \
    --only --stack meshtrain > "$WORK/keys-stack-$prec.json" || fail "meshplan --stack meshtrain on keys.ini"
  same "keys-stack-$prec" "keys-none-$prec" "precision $prec, a profile with attention and collectives keys"
done
differ keys-none-fp32 "$lay-none" "the profile's attention and collectives keys change nothing"

# the search's header names the stack and what it set
mt_guard "$MT_BIN/meshplan" --set model.preset=tiny --set train.global_batch=16 \
  --hw "$MT_SRC/tests/plan/cost-test.ini" --ranks 2 --top 1 --stack deepspeed-zero3 > "$WORK/search.txt" \
  || fail "search with --stack"
grep -q '^# stack deepspeed-zero3 (attention materialized, collectives flat, compute efficiency 0.6231); bytes per element: .*grad_reduce 2' \
  "$WORK/search.txt" || fail "search header: $(grep '^# stack' "$WORK/search.txt")"
# a search under a stack ranks only the layouts the stack could run (and
# says which): megatron-2021 no ZeRO, no sp, no cp, 1F1B and interleaved;
# llm.c dp alone; without --stack the same search ranks the others too
table() { # table NAME ARGS...: every fitting layout's row of a search on 16 ranks
  local name=$1; shift
  mt_guard "$MT_BIN/meshplan" "${model[@]}" --hw a100-80gb-dgx --ranks 16 --top 1000 "$@" \
    > "$WORK/$name.txt" || fail "search $*"
  awk '$1 ~ /^[0-9]+$/' "$WORK/$name.txt" > "$WORK/$name.rows"
  [ -s "$WORK/$name.rows" ] || fail "search $*: no rows"
}
table all
table m21 --stack megatron-2021
table llmc --stack llm.c
grep -q 'layouts the stack could run: ZeRO 0 at most, no sp, no cp, no token slices, schedules 1f1b,interleaved$' \
  "$WORK/m21.txt" || fail "megatron-2021's limits: $(grep '^# stack' "$WORK/m21.txt")"
# columns: rank tp pp cp ep dp zero mb schedule split sp
awk '$7 != 0 || $11 != 0 || $4 != 1 || ($3 > 1 && $9 !~ /^(1f1b|interleaved)(\/|$)/) {bad = 1; print}
     END {exit bad}' "$WORK/m21.rows" || fail "megatron-2021 ranked a layout it could not run"
awk '$2 != 1 || $3 != 1 || $7 > 1 {bad = 1; print} END {exit bad}' "$WORK/llmc.rows" \
  || fail "llm.c ranked a layout beyond dp and ZeRO-1"
awk '$7 != 0 {z = 1} $11 != 0 {s = 1} $3 > 1 && $9 !~ /^(1f1b|interleaved)(\/|$)/ {o = 1}
     END {exit !(z && s && o)}' "$WORK/all.rows" \
  || fail "the search without --stack ranks no ZeRO, sp or other schedule: the checks above test nothing"
[ "$(wc -l < "$WORK/m21.rows")" -lt "$(wc -l < "$WORK/all.rows")" ] || fail "megatron-2021 left nothing out"
echo PASS
