# ZeRO changes memory and traffic, never the numbers: the same global batch
# on dp = 1, 2, 4 at zero = 0, 1, 2, 3 (micro-batches differ, so gradient
# accumulation is covered at every level), and zero 3 with tp = 2 under
# sequence parallelism, give the loss of one rank at each of 20 steps within a
# relative 1e-5 (NaN fails). The same layout twice is bitwise equal (zero 2
# and 3, whose reductions run per micro-batch and per layer).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
        --set train.warmup_steps=5 --set train.lr=3e-3)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=2
runs=()
for z in 0 1 2 3; do
  run dp2z$z 2 --set parallel.dp=2 --set parallel.zero=$z --set train.micro_batch=1
  run dp4z$z 4 --set parallel.dp=4 --set parallel.zero=$z --set train.micro_batch=2
  runs+=("$WORK/dp2z$z" "$WORK/dp4z$z")
done
# small buckets: ZeRO-2 merges several layers per bucket, several buckets per step
run dp2z2b 2 --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1 --set parallel.bucket_mb=0.02
run tp2sp_z3 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=3 \
  --set train.micro_batch=2
run tp2sp_z2 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.zero=2 \
  --set train.micro_batch=1
run z3_recompute 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2 --set train.recompute=true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "${runs[@]}" "$WORK/dp2z2b" \
  "$WORK/tp2sp_z3" "$WORK/tp2sp_z2" "$WORK/z3_recompute" --rtol 1e-5 --steps 20
run dp4z3_again 4 --set parallel.dp=4 --set parallel.zero=3 --set train.micro_batch=2
run dp2z2_again 2 --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/dp4z3" "$WORK/dp4z3_again" --bitwise --steps 20
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/dp2z2" "$WORK/dp2z2_again" --bitwise --steps 20
echo PASS
