# Muon (optim.name = muon), distributed as Canzona: whatever the layout, the
# update is the one rank's. GROUP:
#   dense   dp 2 at ZeRO 0-3, tp 2 + sp, cp 2 x dp 2 at ZeRO 2, tp 2 x dp 2 at ZeRO 3, pp 2 (1f1b and
#           interleaved): 20 steps' losses within a relative 1e-6 of one rank's
#           and the final parameters (dp only: save_params writes one rank's)
#           within 5e-6 (of weights up to 1: the gradients' summation order
#           alone moves AdamW's by 4.5e-6 over these 20 steps); the naive
#           baseline (optim.muon_distribution = replicated) too; the same layout
#           twice bitwise; and not AdamW (the losses differ)
#   moe     experts over ep 2, etp 2, ZeRO 3 and tp x dp x etp x ep: the same
#   ckpt    saved at step 5 under one layout, resumed under others, equal to
#           the run that never stopped; a resume under AdamW refused with one
#           line unless optim.on_switch = reset
#   smoke   a short run of each exchange (the sanitizers' build runs it)
#   bf16    the iteration in bf16 (train.precision = bf16): dp 2 at ZeRO 1 and
#           tp 2 near one rank's (bf16's rounding), and the loss falls
GROUP=$1
MT_NAME=muon; MT_SUFFIX=$GROUP
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
base=(--set model.preset=tiny --set train.steps=20 --set train.global_batch=8
      --set data.train="$corpus" --set train.eval_every=0 --set train.warmup_steps=5
      --set train.lr=3e-3 --set optim.name=muon)
run() { mt_train "$1" "$2" "${base[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
case $GROUP in
  dense)
    N=(--set ckpt.mode=none)
    P=(--set output.save_params=true)
    run ref 1 "${N[@]}" "${P[@]}" --set train.micro_batch=2
    for z in 0 1 2; do
      run dp2z$z 2 "${N[@]}" "${P[@]}" --set parallel.dp=2 --set parallel.zero=$z --set train.micro_batch=1
    done
    run tp2sp 2 "${N[@]}" "${P[@]}" --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=2
    python3 "$CMP" "$WORK/ref" "$WORK/dp2z0" "$WORK/dp2z1" "$WORK/dp2z2" \
      --rtol 1e-6 --param-atol 5e-6 --steps 20
    run pp2 2 "${N[@]}" --set parallel.pp=2 --set train.micro_batch=2
    run dp2z3 2 "${N[@]}" --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=1
    run cp2dp2z2 4 "${N[@]}" --set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=2 \
      --set train.micro_batch=1
    run tp2dp2z3 4 "${N[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true \
      --set parallel.zero=3 --set train.micro_batch=2
    run pp2dp2il 4 "${N[@]}" --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1 \
      --set train.micro_batch=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
      --set model.n_layer=4
    run ref4 1 "${N[@]}" --set train.micro_batch=2 --set model.n_layer=4
    # the naive baseline: every rank orthogonalises every matrix, the same update
    run rep_dp2z1 2 "${N[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=1 \
      --set optim.muon_distribution=replicated
    run rep_tp2dp2z3 4 "${N[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=3 \
      --set train.micro_batch=2 --set optim.muon_distribution=replicated
    python3 "$CMP" "$WORK/ref" "$WORK/tp2sp" "$WORK/pp2" "$WORK/dp2z3" "$WORK/cp2dp2z2" "$WORK/tp2dp2z3" \
      "$WORK/rep_dp2z1" "$WORK/rep_tp2dp2z3" --rtol 1e-6 --steps 20
    python3 "$CMP" "$WORK/ref4" "$WORK/pp2dp2il" --rtol 1e-6 --steps 20
    run dp2z2_again 2 "${N[@]}" "${P[@]}" --set parallel.dp=2 --set parallel.zero=2 --set train.micro_batch=1
    python3 "$CMP" "$WORK/dp2z2" "$WORK/dp2z2_again" --bitwise --steps 20
    run adamw 1 "${N[@]}" --set train.micro_batch=2 --set optim.name=adamw
    python3 - "$WORK/ref/metrics.jsonl" "$WORK/adamw/metrics.jsonl" <<'PY' || fail "Muon's losses are AdamW's"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
d = abs(a[-1] - b[-1])
print("muon %.4f adamw %.4f at step 20" % (a[-1], b[-1]))
sys.exit(0 if d > 1e-3 else 1)
PY
    ;;
  moe)
    base+=(--set model.moe_experts=4 --set model.moe_topk=2 --set model.moe_every=1
           --set train.moe_aux_coef=0.01 --set train.moe_z_coef=0.001 --set model.moe_shared=1
           --set ckpt.mode=none)
    run ref 1 --set train.micro_batch=8
    run dp2ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2
    run tp2etp2 2 --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=8
    run dp4ep2z3 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2
    run tp2dp2etp2ep2 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.etp=2 \
      --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2
    python3 "$CMP" "$WORK/ref" "$WORK/dp2ep2" "$WORK/tp2etp2" "$WORK/dp4ep2z3" "$WORK/tp2dp2etp2ep2" \
      --rtol 1e-6 --steps 20
    ;;
  ckpt)
    S=(--set train.steps=10 --set ckpt.every=5)
    run ref 1 "${S[@]}" --set train.micro_batch=2
    run a_z1 2 "${S[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=1 \
      --set train.stop_after=5
    run a_tp 4 "${S[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.sp=true \
      --set parallel.zero=3 --set train.micro_batch=2 --set train.stop_after=5
    run b_z1to3tp 4 "${S[@]}" --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=3 \
      --set train.micro_batch=2 --set train.resume="$WORK/a_z1/checkpoints"
    run b_tptopp 4 "${S[@]}" --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=0 \
      --set train.micro_batch=1 --set train.resume="$WORK/a_tp/checkpoints"
    python3 "$CMP" "$WORK/ref" "$WORK/b_z1to3tp" "$WORK/b_tptopp" --subset --rtol 1e-6
    for d in b_z1to3tp b_tptopp; do
      grep -q "resumed from .*step_5" "$WORK/$d.log" || fail "$d did not resume from step 5"
    done
    "$MT_BIN/meshckpt" inspect "$WORK/a_z1/checkpoints/step_5" | grep -q "optimizer *muon" \
      || fail "meshckpt inspect does not name the optimizer"
    # the same checkpoint under AdamW: refused (one line, every rank non-zero), then reset
    rc=0
    mt_mpirun 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set optim.name=adamw \
      --set parallel.dp=2 --set train.micro_batch=1 --set train.resume="$WORK/a_z1/checkpoints" \
      --set output.dir="$WORK/c_adamw" > "$WORK/c_adamw.log" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ "$(grep -c "error" "$WORK/c_adamw.log")" -eq 1 ] &&
      grep -q "written by optim.name = muon, this run has adamw" "$WORK/c_adamw.log" \
      || { cat "$WORK/c_adamw.log"; fail "a resume under another optimizer was not refused"; }
    run c_reset 2 "${S[@]}" --set optim.name=adamw --set optim.on_switch=reset --set parallel.dp=2 \
      --set train.micro_batch=1 --set train.resume="$WORK/a_z1/checkpoints"
    grep -q "optim.on_switch = reset starts adamw's state afresh" "$WORK/c_reset.log" \
      || fail "reset did not say so"
    n=$(wc -l < "$WORK/c_reset/metrics.jsonl"); [ "$n" -eq 5 ] || fail "reset ran $n steps, want 5"
    ;;
  bf16)
    B=(--set train.precision=bf16 --set ckpt.mode=none)
    run ref 1 "${B[@]}" --set train.micro_batch=2
    run dp2z1 2 "${B[@]}" --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=1
    run tp2 2 "${B[@]}" --set parallel.tp=2 --set train.micro_batch=2
    python3 "$CMP" "$WORK/ref" "$WORK/dp2z1" "$WORK/tp2" --rtol 2e-2 --steps 20
    python3 - "$WORK/ref/metrics.jsonl" <<'PY' || fail "bf16 Muon's loss did not fall"
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1])]
print("loss %.4f -> %.4f" % (l[0], l[-1]))
sys.exit(0 if l[-1] < l[0] - 0.5 else 1)
PY
    ;;
  smoke) # the sanitizers' pass: the exchange over dp x cp and tp, experts over edp and etp
    run tp2dp2z3 4 --set ckpt.mode=none --set train.steps=3 --set parallel.dp=2 --set parallel.tp=2 \
      --set parallel.sp=true --set parallel.zero=3 --set train.micro_batch=2
    run moe 4 --set ckpt.mode=none --set train.steps=3 --set model.moe_experts=4 --set model.moe_topk=2 \
      --set parallel.dp=2 --set parallel.tp=2 --set parallel.etp=2 --set parallel.ep=2 \
      --set parallel.zero=1 --set train.micro_batch=2 --set optim.muon_distribution=replicated
    ;;
  *) fail "unknown group $GROUP" ;;
esac
echo PASS
