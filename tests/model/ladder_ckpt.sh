# Ladder checkpoints: the tiny Llama with the ladder residual trains 6 steps
# at tp = 2 with sp and checkpoints; resumes at dp = 2 ZeRO-3 to step 9 and
# at pp = 2 zb-v to step 12; every step equals an uninterrupted one-rank run
# within 1e-5. The checkpoint says residual = 1 (meshckpt inspect: ladder;
# kept by meshckpt convert --target tp=2,pp=2, which verifies); a run with
# the standard residual refuses it with one line (resume: exit on both
# ranks, nothing written; train.init_from with no model key takes the
# ladder from it, and a ladder given for a standard checkpoint is
# refused); the Hugging Face export refuses it (no class has the ladder).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny-llama --set model.n_layer=4 --set model.residual=ladder
        --set train.steps=12 --set train.global_batch=8 --set data.train="$corpus"
        --set train.eval_every=0 --set train.warmup_steps=5 --set train.lr=3e-3
        --set ckpt.mode=shared)
run() { mt_train "$1" "$2" "${common[@]}" "${@:3}"; }
run ref 1 --set train.micro_batch=8 --set output.dir="$WORK/ref" --set ckpt.mode=none
run a 2 --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4 \
  --set train.stop_after=6 --set output.dir="$WORK/run"
"$MT_BIN/meshckpt" verify "$WORK/run/checkpoints" > "$WORK/verify.txt" \
  || { cat "$WORK/verify.txt"; fail "verify"; }
"$MT_BIN/meshckpt" inspect "$WORK/run/checkpoints" > "$WORK/inspect.txt"
grep -q "residual  *ladder" "$WORK/inspect.txt" \
  || { cat "$WORK/inspect.txt"; fail "inspect: no ladder"; }
run b 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=4 \
  --set train.stop_after=3 --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_6 (step 6, written by dp=1 tp=2" "$WORK/b.log" \
  || { cat "$WORK/b.log"; fail "dp = 2 did not resume tp = 2"; }
run c 2 --set parallel.pp=2 --set parallel.schedule=zb-v --set parallel.virtual_stages=2 \
  --set train.micro_batch=2 --set train.resume=auto --set output.dir="$WORK/run"
grep -q "resumed from .*step_9 (step 9, written by dp=2 tp=1" "$WORK/c.log" \
  || { cat "$WORK/c.log"; fail "pp = 2 did not resume dp = 2"; }
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "$WORK/run" --rtol 1e-5 --steps 12
# a conversion for another layout keeps the residual (and verifies)
mt_mpirun 2 "$MT_BIN/meshckpt" convert "$WORK/run/checkpoints" "$WORK/conv" --mode per-writer \
  --target tp=2,pp=2 > "$WORK/conv.txt" 2>&1 || { cat "$WORK/conv.txt"; fail "convert"; }
"$MT_BIN/meshckpt" verify "$WORK/conv" > "$WORK/verifyc.txt" \
  || { cat "$WORK/verifyc.txt"; fail "verify the conversion"; }
"$MT_BIN/meshckpt" inspect "$WORK/conv" | grep -q "residual  *ladder" \
  || fail "the conversion lost the residual"
# a standard run refuses the ladder checkpoint with one line, on both ranks,
# and writes nothing
before=$(ls "$WORK/run/checkpoints")
if mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set model.residual=standard \
  --set parallel.dp=2 --set train.micro_batch=4 --set train.steps=14 --set train.resume=auto \
  --set output.dir="$WORK/run" > "$WORK/std.log" 2>&1; then
  fail "a standard run resumed a ladder checkpoint"
fi
grep -q "is a checkpoint of another model: residual = 1 there, 0 in this run" "$WORK/std.log" \
  || { cat "$WORK/std.log"; fail "no one-line refusal naming the residual"; }
[ "$(grep -c "another model" "$WORK/std.log")" = 1 ] \
  || { cat "$WORK/std.log"; fail "not one line"; }
[ "$(ls "$WORK/run/checkpoints")" = "$before" ] || fail "the refused run changed the checkpoints"
# train.init_from: no model key takes the checkpoint's residual; a ladder
# given for a standard checkpoint is refused
init=(--set data.train="$corpus" --set train.global_batch=8 --set train.micro_batch=8
      --set train.eval_every=0 --set train.steps=1 --set ckpt.mode=none)
mt_train stdckpt 1 "${common[@]}" --set model.residual=standard --set train.micro_batch=8 \
  --set train.steps=1 --set output.dir="$WORK/std"
if mt_mpirun 1 "$MT_BIN/meshtrain" "${init[@]}" --set model.residual=ladder \
  --set train.init_from="$WORK/std/checkpoints/latest" --set output.dir="$WORK/init_lad" \
  > "$WORK/init_lad.log" 2>&1; then
  fail "init_from a standard checkpoint into a ladder model"
fi
grep -q "train.init_from: model.residual = 1 (given), but .* holds a model with 0" \
  "$WORK/init_lad.log" || { cat "$WORK/init_lad.log"; fail "init_from: no refusal"; }
init+=(--set train.init_from="$WORK/run/checkpoints/latest")
mt_mpirun 1 "$MT_BIN/meshtrain" "${init[@]}" --set output.dir="$WORK/init" > "$WORK/init.log" \
  2>&1 || { cat "$WORK/init.log"; fail "init_from a ladder checkpoint"; }
grep -q "ladder residual" "$WORK/init.log" \
  || { cat "$WORK/init.log"; fail "init_from: not the ladder"; }
grep -q "^residual = ladder$" "$WORK/init/config.ini" || fail "config.ini does not say the residual"
# no Hugging Face class has the ladder: refused with one line
if mt_mpirun 1 "$MT_BIN/meshckpt" export "$WORK/run/checkpoints" "$WORK/hf" --format hf \
  > "$WORK/hf.log" 2>&1; then fail "a ladder checkpoint exported to Hugging Face"; fi
grep -q "the ladder residual .* has no Hugging Face class" "$WORK/hf.log" \
  || { cat "$WORK/hf.log"; fail "export: no refusal naming the ladder"; }
[ ! -e "$WORK/hf/config.json" ] || fail "the refused export wrote config.json"
echo "PASS: ladder checkpoints resume across layouts and are refused by a standard run"
