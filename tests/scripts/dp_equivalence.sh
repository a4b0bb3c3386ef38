# Data parallelism changes the speed and nothing else: the same global batch
# on dp = 1, 2, 4 (with and without ZeRO-1) gives the same loss at each of 20
# steps (relative 1e-5) and final parameters within 1e-4 absolute. The
# micro-batch differs between runs, so gradient accumulation is covered too.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set output.save_params=true
        --set train.warmup_steps=5 --set train.lr=3e-3)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run dp1 1 --set parallel.dp=1 --set train.micro_batch=2
run dp2 2 --set parallel.dp=2 --set train.micro_batch=2
run dp4 4 --set parallel.dp=4 --set train.micro_batch=1
run dp2z 2 --set parallel.dp=2 --set train.micro_batch=4 --set parallel.zero=1
run dp4z 4 --set parallel.dp=4 --set train.micro_batch=2 --set parallel.zero=1
run dp4zb 4 --set parallel.dp=4 --set train.micro_batch=2 --set parallel.zero=1 --set parallel.bucket_mb=0.01
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/dp1" "$WORK"/dp2 "$WORK"/dp4 "$WORK"/dp2z \
  "$WORK"/dp4z "$WORK"/dp4zb --rtol 1e-5 --param-atol 1e-4 --steps 20
