# Context parallelism changes where attention runs, never the numbers: the
# same global batch on cp = 2 and 4 (ring and Ulysses), cp = 2 with tp = 2
# under sequence parallelism (both modes), with pp = 2, with dp = 2 and ZeRO
# 1/2/3, and with recompute gives the loss of one rank at each of 10 steps
# within a relative 1e-5 (NaN fails); the validation loss too. The same cp
# layout twice is bitwise equal.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=10 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=5 --set train.eval_batches=1
        --set ckpt.mode=none --set train.warmup_steps=5 --set train.lr=3e-3
        --set train.micro_batch=2)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1
runs=()
for mode in ring ulysses; do
  for cp in 2 4; do
    run ${mode}_cp$cp $cp --set parallel.cp=$cp --set parallel.cp_mode=$mode
    runs+=("$WORK/${mode}_cp$cp")
  done
  run ${mode}_tp2sp 4 --set parallel.cp=2 --set parallel.cp_mode=$mode --set parallel.tp=2 \
    --set parallel.sp=true
  runs+=("$WORK/${mode}_tp2sp")
done
run ring_pp2 4 --set parallel.cp=2 --set parallel.pp=2
run ulysses_pp2_zb 4 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set parallel.pp=2 \
  --set parallel.schedule=zb-h1 --set train.micro_batch=1
for z in 1 2 3; do
  mode=$([ $z = 2 ] && echo ulysses || echo ring)
  run dp2z${z}_$mode 4 --set parallel.cp=2 --set parallel.cp_mode=$mode --set parallel.dp=2 \
    --set parallel.zero=$z --set train.micro_batch=1
  runs+=("$WORK/dp2z${z}_$mode")
done
run ring_recompute 2 --set parallel.cp=2 --set train.recompute=true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "${runs[@]}" "$WORK/ring_pp2" \
  "$WORK/ulysses_pp2_zb" "$WORK/ring_recompute" --rtol 1e-5 --steps 10
# validation losses (steps 5 and 10) within the same tolerance
python3 - "$WORK/ref" "${runs[@]}" "$WORK/ring_pp2" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import within
def val(run):
    return [json.loads(l)["val_loss"] for l in open(run + "/metrics.jsonl") if '"val_loss"' in l]
ref = val(sys.argv[1])
if len(ref) != 2:
    sys.exit("FAIL: the reference has %d validation losses, expected 2" % len(ref))
for run in sys.argv[2:]:
    got = val(run)
    if len(got) != len(ref) or not all(within(a, b, 1e-5) for a, b in zip(got, ref)):
        sys.exit("FAIL: %s validation losses %s vs %s" % (run, got, ref))
print("ok   validation losses of %d runs within 1e-5 of one rank's" % (len(sys.argv) - 2))
PY
# the layout's bits do not change from run to run
run ring_cp4_again 4 --set parallel.cp=4
run ulysses_tp2sp_again 4 --set parallel.cp=2 --set parallel.cp_mode=ulysses --set parallel.tp=2 \
  --set parallel.sp=true
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ring_cp4" "$WORK/ring_cp4_again" --bitwise --steps 10
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ulysses_tp2sp" "$WORK/ulysses_tp2sp_again" \
  --bitwise --steps 10
echo PASS
