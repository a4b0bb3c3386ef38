# bf16 under other layouts: the same global batch on one rank (micro-batch
# 2), dp = 2 with ZeRO-1 (micro-batch 4: accumulation differs), dp = 2 with
# ZeRO-3 (the bf16 copy's shards gathered), pp = 2 zb-h1 with recompute
# (bf16 messages, split backward), tp = 2 with sp, dp = 2 x tp = 2 with
# sp at ZeRO-3 (bf16 all-gathers and reduce-scatters over tp), ring
# context parallelism cp = 2 (bf16 K/V and dK/dV round the ring), Ulysses
# cp = 2 (bf16 all-to-alls of q|k|v, the output and their gradients), dp = 2 x
# pp = 2 at ZeRO-2 (zb-h1) and ZeRO-3 (breadth-first): losses within
# rtol 1e-3 of the one-rank run at each of 10 steps (NaN fails).
# Why 1e-3: layouts sum the fp32 gradients in different orders (relative
# 1e-7), so a master weight close to the midpoint of two bf16 values rounds
# to the other one on one layout; each such flip moves a weight of the copy
# by one bf16 unit, 2^-8 relative (u = 3.9e-3). tp adds one rounding to
# every output of a row-parallel layer (the bf16 sum of the ranks' bf16
# partial outputs: at most u/2 relative each). Were every weight and
# activation off by a unit the loss could move by about u; these errors are
# unbiased and uncorrelated, so the bound is u/4 = 1e-3, 9x what was
# measured (dp 4.9e-5, tp 1.1e-4, cp 5.8e-5 ring, 2.0e-5 Ulysses at most; pp and
# recompute are bitwise equal: they cut no sum).
# Reducing the gradients in bf16 rounds each rank's gradient and each
# partial sum to bf16 (at most u/2 relative, unbiased): AdamW divides the
# first moment by the root of the second, so the update moves by about
# that relative error, less than the copy's unit flips above; measured on
# its own against the same layout reduced in fp32: 4.0e-5 (ZeRO-0/1) and
# 8.4e-5 (ZeRO-2/3) at most over 20 steps.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set train.warmup_steps=5
        --set train.lr=3e-3 --set train.precision=bf16)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=2
run dp2z1 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=4
run dp2z3 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2
run pp2zbrc 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=true \
  --set train.micro_batch=2
run tp2sp 2 --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=2
run dp2tp2spz3 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true \
  --set parallel.zero=3 --set train.micro_batch=2
run cp2 2 --set parallel.cp=2 --set train.micro_batch=2
run cp2uly 2 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set train.micro_batch=2
# ZeRO-2/3 under pipeline parallelism: zb-h1's open gradient buffers at
# ZeRO-2, breadth-first's per-unit bf16 gather buffers at ZeRO-3
run dp2pp2z2zb 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=2 \
  --set parallel.schedule=zb-h1 --set train.micro_batch=2
run dp2pp2z3bfs 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=3 \
  --set parallel.schedule=breadth-first --set train.micro_batch=2
# the gradients reduced in bf16 (parallel.grad_reduce_dtype = bf16): all-reduce
# at ZeRO-0, reduce-scatter at ZeRO-3, over dp x cp
run dp2z0r16 2 --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2 \
  --set parallel.grad_reduce_dtype=bf16
run dp2z3r16 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2 \
  --set parallel.grad_reduce_dtype=bf16
run cp2dp2z1r16 4 --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=1 \
  --set train.micro_batch=1 --set parallel.grad_reduce_dtype=bf16
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/dp2z1" "$WORK/dp2z3" \
  "$WORK/pp2zbrc" "$WORK/tp2sp" "$WORK/dp2tp2spz3" "$WORK/cp2" "$WORK/cp2uly" \
  "$WORK/dp2pp2z2zb" "$WORK/dp2pp2z3bfs" "$WORK/dp2z0r16" "$WORK/dp2z3r16" "$WORK/cp2dp2z1r16" \
  --rtol 1e-3 --steps 10
# MoE (4 experts, top-2, every block) under bf16: one rank against ep = 2
# over dp (bf16 rows in the all-to-alls), tp = 2 x etp = 2 (bf16 all-gather
# and reduce-scatter of the rows over etp) and tp x dp x sp x ep x etp at
# ZeRO-1, within the same rtol 1e-3: the router is fp32 on the same bf16
# inputs, so a layout moves the loss only through the weight-copy flips and
# tp roundings above, plus a routing choice that flips when two experts'
# fp32 scores are within those perturbations (measured: 2.3e-4, 5.7e-4 and
# 6.1e-4 at most over 20 steps). And the bf16 MoE run against fp32 on one
# rank, within rtol 2e-3 (u/2: every activation and the weights' copy
# rounded, unbiased; measured 5.8e-4 at most).
moe=(--set model.moe_experts=4 --set model.moe_topk=2 --set model.moe_every=1
     --set train.moe_aux_coef=0.01 --set train.moe_z_coef=0.001)
run moeref 1 "${moe[@]}" --set train.micro_batch=2
run moeep2 2 "${moe[@]}" --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2
run moetp2etp2 2 "${moe[@]}" --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=2
run moemesh 4 "${moe[@]}" --set parallel.tp=2 --set parallel.dp=2 --set parallel.sp=true \
  --set parallel.ep=2 --set parallel.etp=2 --set parallel.zero=1 --set train.micro_batch=2
run moef32 1 "${moe[@]}" --set train.micro_batch=2 --set train.precision=fp32
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/moeref" "$WORK/moeep2" \
  "$WORK/moetp2etp2" "$WORK/moemesh" --rtol 1e-3 --steps 10
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/moef32" "$WORK/moeref" --rtol 2e-3 \
  --steps 10
echo PASS
