# The same tensor-parallel layout (dp=2, tp=2, sp, ZeRO-1) run twice:
# bitwise identical losses.
MT_NAME=tp_determinism
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
for i in 1 2; do
  mt_mpirun 4 "$MT_BIN/meshtrain" --set model.preset=tiny --set train.steps=8 \
    --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=2 --set parallel.tp=2 \
    --set parallel.sp=true --set parallel.zero=1 --set data.train="$corpus" --set train.eval_every=4 \
    --set output.dir="$WORK/run$i" > "$WORK/run$i.log" 2>&1 || { cat "$WORK/run$i.log"; fail "run $i failed"; }
done
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/run1" "$WORK/run2" --bitwise --steps 8
