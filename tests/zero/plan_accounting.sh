# The plan equals what a run counts, exactly: for PRESET (tiny or small) at
# zero = 0, 1, 2, 3 on dp = 2 (and on tiny also dp = 4, tp = 2 with
# sequence parallelism at zero 3, and context parallelism: ring and Ulysses,
# alone, with dp = 2 and ZeRO-3, with tp = 2 and sp, with pp = 2 and
# recompute; token slices: pp 2 x dp 2 at ZeRO-2, Ulysses cp = 2; bf16
# also pp 2 x dp 2 at ZeRO-3: the key/value caches as activations),
# `meshtrain --plan-json` (no MPI, no
# allocation) predicts every rank's bytes by category (parameters,
# gradients, optimizer state, gathered parameters, activations, comm
# buffers) and the bytes it sends per step over dp (the dp x cp group), tp,
# pp and cp; the run's
# allocator counters (summary.json ranks[].mem_peak_bytes) and comm's
# counters (ranks[].last_step_bytes) must equal them. Prints the table.
# Arguments after PRESET are added to every run (tests/gpu/memory.sh: the
# same on a GPU).
# tiny_bf16: tiny under train.precision = bf16 (the bf16 weights' copy,
# activations, pipeline and tp messages): dp = 2 at every zero, dp = 4 at
# zero 3, pp = 2 (1f1b, and zb-h1 with recompute), tp = 2 (with sp at
# zero 3, dp = 2), ring cp = 2, Ulysses cp = 2 (bf16 all-to-alls, the
# head-layout pieces and scratch in bf16) alone and with dp = 2 at zero 3;
# and the gradients reduced in bf16
# (parallel.grad_reduce_dtype = bf16: half the dp x cp bytes, the bf16
# staging buffers as comm buffers) at dp = 2 zero 0-2, dp = 4 zero 3,
# dp 2 x cp 2 at zero 1, dp 2 x pp 2 at zero 2 under zb-h1; and the
# gradients held in bf16 (train.grad_dtype = bf16: the bf16 gradients and
# the fp32 slots a piece of backward writes in) at dp = 2 zero 0-2, dp = 4
# zero 3, pp 2 x dp 2 at zero 1 (the tied sum), pp = 2 zb-h1 with
# recompute, tp = 2 + sp at zero 1 (partial gradients summed over tp).
MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
preset=$1 bf16=0
if [ "$preset" = tiny_bf16 ]; then preset=tiny bf16=1; fi
corpus=$(mt_corpus 400000)
common=(--set model.preset="$preset" --set train.steps=2 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none "${@:2}")
[ $bf16 = 1 ] && common+=(--set train.precision=bf16)
[ "$preset" = small ] && common+=(--set model.seq_len=128)
cases=("dp2z0 2 --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2"
       "dp2z1 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2"
       "dp2z2 2 --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1"
       "dp2z3 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2")
# bf16 gradients (train.grad_dtype = bf16, reduced in bf16): the bf16
# gradients and the fp32 slots of the units a piece of backward writes
g16=(--set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16)
if [ $bf16 = 1 ]; then
  cases+=("dp4z3 4 --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=1"
          "pp2z1 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2"
          "pp2zbrc 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=true --set train.micro_batch=2"
          "tp2spz3 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=3 --set train.micro_batch=2"
          "tp2z1 2 --set parallel.tp=2 --set parallel.zero=1 --set train.micro_batch=4"
          "cp2ring 2 --set parallel.cp=2 --set parallel.zero=1 --set train.micro_batch=2"
          "cp2uly 2 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set train.micro_batch=4"
          "cp2dp2z3uly 4 --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=3 --set parallel.cp_mode=ulysses --set train.micro_batch=1"
          "dp2z0r16 2 --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2 --set parallel.grad_reduce_dtype=bf16"
          "dp2z1r16 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 --set parallel.grad_reduce_dtype=bf16"
          "dp2z2r16 2 --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1 --set parallel.grad_reduce_dtype=bf16"
          "dp4z3r16 4 --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=1 --set parallel.grad_reduce_dtype=bf16"
          "cp2dp2z1r16 4 --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=1 --set parallel.grad_reduce_dtype=bf16"
          "pp2dp2z2zbr16 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=2 --set parallel.schedule=zb-h1 --set train.micro_batch=2 --set parallel.grad_reduce_dtype=bf16"
          "dp2z0g16 2 --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2 ${g16[*]}"
          "dp2z1g16 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 ${g16[*]}"
          "dp2z2g16 2 --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1 ${g16[*]}"
          "dp4z3g16 4 --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=1 ${g16[*]}"
          "pp2dp2z1g16 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2 ${g16[*]}"
          "pp2zbrcg16 2 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=true --set train.micro_batch=2 ${g16[*]}"
          "tp2spz1g16 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=1 --set train.micro_batch=4 ${g16[*]}"
          "pp2k4z3 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=3 --set parallel.pp_token_slices=4 --set train.micro_batch=2")
elif [ "$preset" = tiny ]; then
  cases+=("dp4z3 4 --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=1"
          "dp4z2b 4 --set parallel.dp=4 --set parallel.zero=2 --set train.micro_batch=1 --set parallel.bucket_mb=0.02"
          "tp2spz3 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=3 --set train.micro_batch=2"
          "tp2z1 2 --set parallel.tp=2 --set parallel.zero=1 --set train.micro_batch=4"
          "cp2ring 2 --set parallel.cp=2 --set parallel.zero=1 --set train.micro_batch=2"
          "cp2uly 2 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set train.micro_batch=4"
          "cp2dp2z3 4 --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=3 --set parallel.cp_mode=ulysses --set train.micro_batch=1"
          "cp2tp2sp 4 --set parallel.cp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=2 --set train.micro_batch=2"
          "cp2pp2rc 4 --set parallel.cp=2 --set parallel.pp=2 --set train.recompute=true --set train.micro_batch=2"
          "pp2dp2k4z2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=2 --set parallel.pp_token_slices=4 --set train.micro_batch=2"
          "cp2ulyk2 2 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set parallel.pp_token_slices=2 --set train.micro_batch=4")
fi
for c in "${cases[@]}"; do mt_plan_and_train "$c" "${common[@]}"; done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,cp "${cases[@]}" || fail "plan and run differ"
echo PASS
