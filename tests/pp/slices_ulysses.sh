# Token slices under Ulysses context parallelism (tiny, 4 layers, 10 steps):
# each rank holds its cp chunk of every slice, the all-to-alls move a
# slice's rows, and the key/value cache is in the head layout. pp 2 x cp 2
# with 2 slices (1f1b), cp 2 with 4 slices on one stage, and pp 2 x cp 2 x
# dp 2 with 2 slices at ZeRO-1 give the single-rank losses (relative 1e-5).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=10
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=5
        --set train.eval_batches=1 --set train.lr=3e-3 --set ckpt.mode=none
        --set parallel.cp_mode=ulysses)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8
run pp2cp2k2 4 --set parallel.pp=2 --set parallel.cp=2 --set parallel.pp_token_slices=2 \
  --set train.micro_batch=4
run cp2k4 2 --set parallel.cp=2 --set parallel.pp_token_slices=4 --set train.micro_batch=4
run pp2cp2dp2k2 8 --set parallel.pp=2 --set parallel.cp=2 --set parallel.dp=2 \
  --set parallel.zero=1 --set parallel.pp_token_slices=2 --set train.micro_batch=2
grep -q "cp=2" "$WORK/pp2cp2k2.log" || fail "pp2cp2k2 did not run cp 2"
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/pp2cp2k2" "$WORK/cp2k4" \
  "$WORK/pp2cp2dp2k2" --rtol 1e-5 --steps 10
echo "PASS: token slices under Ulysses give the single-rank losses"
