# uneven.sh equiv|ckpt: pipeline stages of unequal depth (tiny with 6 layers,
# global batch 8, 10 steps).
#   equiv: the single-rank loss at every step (relative 1e-5) from 2 stages
#          of 2 + 4 layers (parallel.pp_first_layers = 2), 3 stages of
#          1 + 4 + 1 (pp_first_layers = pp_last_layers = 1) and 2 interleaved
#          stages of 2 + 4 layers in chunks of 1 and 2; the 2-stage run's
#          allocator and comm counters equal meshtrain --plan-json's, rank by
#          rank (the plan knows the split).
#   ckpt:  a checkpoint written at step 5 under an even split (pp = 2, 3 + 3)
#          resumed under 3 uneven stages (1 + 4 + 1) continues the curve of
#          the uninterrupted single-rank run (relative 1e-5).
MODE=$1 MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
common=(--set model.preset=tiny --set model.n_layer=6 --set train.steps=10
        --set train.global_batch=8 --set data.train="$corpus" --set train.eval_every=0
        --set train.warmup_steps=3 --set train.lr=3e-3)
# run NAME NP ARGS...
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
run ref 1 --set train.micro_batch=8 --set ckpt.mode=none
if [ "$MODE" = equiv ]; then
  u2=(--set parallel.pp=2 --set parallel.pp_first_layers=2 --set train.micro_batch=2
      --set ckpt.mode=none)
  mt_plan u2 "${common[@]}" "${u2[@]}" --set output.dir="$WORK/u2"
  run u2 2 "${u2[@]}"
  run u3 3 --set parallel.pp=3 --set parallel.pp_first_layers=1 --set parallel.pp_last_layers=1 \
    --set train.micro_batch=1 --set ckpt.mode=none
  run u2i 2 --set parallel.pp=2 --set parallel.pp_first_layers=2 --set parallel.schedule=interleaved \
    --set parallel.virtual_stages=2 --set train.micro_batch=2 --set ckpt.mode=none
  # the split is the plan's: stage 1 of 2 + 4 holds a layer more than of 3 + 3
  "$MT_BIN/meshtrain" "${common[@]}" --set parallel.pp=2 --set train.micro_batch=2 \
    --plan-json "$WORK/even.plan.json" > /dev/null || fail "plan even"
  python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def params(name, rank):
    return json.load(open("%s/%s.plan.json" % (work, name)))["ranks"][rank]["params_numel"]
u, e = params("u2", 1), params("even", 1)
print("stage 1 parameters: 2 + 4 split %d, 3 + 3 split %d" % (u, e))
if not u > e:
    sys.exit("FAIL: the plan of pp_first_layers = 2 does not give stage 1 more layers")
PY
  python3 "$CMP" "$WORK/ref" "$WORK/u2" "$WORK/u3" "$WORK/u2i" --rtol 1e-5 --steps 10
  python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,cp u2 || fail "plan and run differ (u2)"
else
  run even 2 --set parallel.pp=2 --set train.micro_batch=2 --set train.stop_after=5
  run uneven 3 --set parallel.pp=3 --set parallel.pp_first_layers=1 --set parallel.pp_last_layers=1 \
    --set train.micro_batch=1 --set train.resume="$WORK/even/checkpoints" --set ckpt.mode=none
  grep -q "resum" "$WORK/uneven.log" || { cat "$WORK/uneven.log"; fail "the uneven run did not resume"; }
  python3 "$CMP" "$WORK/ref" "$WORK/uneven" --subset --rtol 1e-5
fi
echo PASS
