# Checkpoints of experts reshard: the tiny MoE model trains 6 steps at
# ep = 4 (dp = 4, ZeRO-1) and checkpoints; resumes at ep = 2 (dp = 2) for 6
# more, checkpoints (per-writer); resumes on one rank (ep = 1) to step 18;
# and the ep = 4 checkpoint also resumes at tp = 2 with etp = 2, and
# converts (per-writer, bf16) with its experts' splits kept, and converts
# for a target layout (--target tp=2,pp=2,ep=2: one shard file per target
# rank, the experts in ep shards) that a tp = 2 x pp = 2 x ep = 2 run
# resumes to step 18, and for tp = 2 x etp = 2 (verifies); a target the experts cannot be split to is refused
# (one line, exit 2, nothing written). Every step of every part equals an
# uninterrupted one-rank run of 18 steps within 1e-5.
# meshckpt verify accepts each checkpoint and meshckpt inspect shows the MoE
# layout (experts stored whole, E x out x in, written by ep = 4).
MT_NAME=moe_reshard
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=18 --set train.eval_every=0 --set ckpt.mode=shared)
run ref 1 --set train.micro_batch=8
run ep4 4 --set parallel.dp=4 --set parallel.ep=4 --set parallel.zero=1 --set train.micro_batch=2 \
  --set train.stop_after=6
"$MT_BIN/meshckpt" verify "$WORK/ep4/checkpoints" > "$WORK/verify4.txt" || { cat "$WORK/verify4.txt"; fail "verify ep4"; }
"$MT_BIN/meshckpt" inspect "$WORK/ep4/checkpoints" --tensors > "$WORK/inspect4.txt"
grep -q "moe  *4 experts, top-2" "$WORK/inspect4.txt" || { cat "$WORK/inspect4.txt"; fail "inspect: no MoE line"; }
grep -q "folded mesh ep=4 etp=1" "$WORK/inspect4.txt" || fail "inspect: not written by ep=4"
grep -q "blocks.0.moe.experts.fc.weight  *\[4, 128, 32\]  ep dim0, etp dim1" "$WORK/inspect4.txt" \
  || { cat "$WORK/inspect4.txt"; fail "inspect: the expert tensor is not E x out x in"; }
# a MoE checkpoint converts (shared -> per-writer, parameters bf16) with its
# experts' attributes kept: it verifies, and equals the source within bf16
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$WORK/ep4/checkpoints" "$WORK/conv" --mode per-writer \
  --dtype bf16 > "$WORK/conv.txt" 2>&1 || { cat "$WORK/conv.txt"; fail "convert the MoE checkpoint"; }
"$MT_BIN/meshckpt" verify "$WORK/conv" > "$WORK/verifyc.txt" || { cat "$WORK/verifyc.txt"; fail "verify converted"; }
"$MT_BIN/meshckpt" inspect "$WORK/conv" --tensors | grep -q "blocks.0.moe.experts.fc.weight  *\[4, 128, 32\]  ep dim0, etp dim1" \
  || fail "converted: the expert tensor lost its splits"
"$MT_BIN/meshckpt" diff "$WORK/ep4/checkpoints" "$WORK/conv" --rtol 1e-2 > "$WORK/diffc.txt" \
  || { cat "$WORK/diffc.txt"; fail "converted MoE checkpoint differs beyond bf16 rounding"; }
cp -r "$WORK/ep4" "$WORK/etp2"
cp -r "$WORK/ep4" "$WORK/tgt"
# a target layout for the experts too: 4 writers (2 stages x tp 2, ep 2 over them)
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$WORK/ep4/checkpoints" "$WORK/tgtconv" --mode per-writer \
  --target tp=2,pp=2,ep=2 > "$WORK/tgtconv.txt" 2>&1 || { cat "$WORK/tgtconv.txt"; fail "convert --target"; }
[ "$(ls "$WORK/tgtconv/step_6" | grep -c '^shard-0000[0-3].h5$')" -eq 4 ] || fail "convert --target: not 4 shard files"
"$MT_BIN/meshckpt" verify "$WORK/tgtconv" > "$WORK/verifyt.txt" || { cat "$WORK/verifyt.txt"; fail "verify --target"; }
# the converted checkpoint records the experts' target mesh beside tp and pp
"$MT_BIN/meshckpt" inspect "$WORK/tgtconv" > "$WORK/inspectt.txt"
grep -q "laid out for    tp=2 pp=2 ep=2 etp=1" "$WORK/inspectt.txt" \
  || { cat "$WORK/inspectt.txt"; fail "inspect: the target's ep, etp not recorded"; }
# experts split inside (etp = 2): the down projection's bias, replicated
# over etp, is written once (by etp rank 0), so the converted checkpoint
# passes the overlap check before the commit and verifies; pp as written
"$MT_BIN/meshckpt" convert "$WORK/ep4/checkpoints" "$WORK/etpconv" --target tp=2,etp=2 \
  > "$WORK/etpconv.txt" 2>&1 || { cat "$WORK/etpconv.txt"; fail "convert --target tp=2,etp=2"; }
grep -q "laid out for tp=2 pp=1 ep=1 etp=2" "$WORK/etpconv.txt" || { cat "$WORK/etpconv.txt"; fail "convert --target tp=2,etp=2: layout"; }
"$MT_BIN/meshckpt" verify "$WORK/etpconv" > "$WORK/verifye.txt" || { cat "$WORK/verifye.txt"; fail "verify --target tp=2,etp=2"; }
for t in "tp=1,pp=1,ep=3:--target ep=3 does not divide the checkpoint's 4 experts" \
         "tp=2,pp=1,ep=2,etp=3:--target etp=3 does not divide the experts' hidden size 128"; do
  set +e; "$MT_BIN/meshckpt" convert "$WORK/ep4/checkpoints" "$WORK/badtgt" --target "${t%%:*}" \
    > "$WORK/badtgt.log" 2>&1; rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/badtgt.log")" -eq 1 ] && grep -qF -- "${t#*:}" "$WORK/badtgt.log" \
    && [ ! -e "$WORK/badtgt" ] || { cat "$WORK/badtgt.log"; fail "--target ${t%%:*}: rc $rc, want one line '${t#*:}'"; }
done
run ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=4 --set train.stop_after=6 \
  --set train.resume="$WORK/ep4/checkpoints" --set output.dir="$WORK/ep4" --set ckpt.mode=per-writer
grep -q "resumed from .*step_6 (step 6, written by dp=4 tp=1 pp=1 cp=1 ep=4 etp=1" "$WORK/ep2.log" \
  || { cat "$WORK/ep2.log"; fail "ep2 did not resume the ep=4 checkpoint"; }
"$MT_BIN/meshckpt" verify "$WORK/ep4/checkpoints" > "$WORK/verify2.txt" || { cat "$WORK/verify2.txt"; fail "verify ep2"; }
run ep1 1 --set train.micro_batch=8 --set train.resume=auto --set output.dir="$WORK/ep4"
grep -q "resumed from .*step_12 (step 12, written by dp=2 tp=1 pp=1 cp=1 ep=2 etp=1" "$WORK/ep1.log" \
  || { cat "$WORK/ep1.log"; fail "ep1 did not resume the ep=2 checkpoint"; }
run etp2 2 --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=8 --set train.resume=auto \
  --set output.dir="$WORK/etp2"
grep -q "resumed from .*step_6" "$WORK/etp2.log" || fail "etp2 did not resume"
run tgt 4 --set parallel.tp=2 --set parallel.pp=2 --set parallel.ep=2 --set train.micro_batch=2 \
  --set train.resume="$WORK/tgtconv/step_6" --set output.dir="$WORK/tgt"
grep -q "resumed from .*tgtconv/step_6" "$WORK/tgt.log" || { cat "$WORK/tgt.log"; fail "tgt did not resume"; }
# $WORK/ep4/metrics.jsonl now holds steps 1-18 from ep = 4, 2 and 1
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/ep4" --rtol 1e-5 --steps 18
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/etp2" --rtol 1e-5 --steps 18
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/tgt" --rtol 1e-5 --steps 18
echo PASS
