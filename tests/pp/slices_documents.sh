# Token slices with documents (data.documents = true: each line of the text
# corpus a document, data.eot = the newline; positions restart at each
# document and attention stays inside it): pp 2 with 4 slices and one stage
# with 2 slices give the single-rank losses (relative 1e-5, 10 steps, and
# the validation losses), gpt2 (learned positions) and llama (rotary).
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
common=(--set model.n_layer=4 --set train.steps=10 --set train.global_batch=8
        --set train.micro_batch=2 --set data.train="$corpus" --set train.eval_every=5
        --set train.eval_batches=1 --set ckpt.mode=none --set train.lr=3e-3
        --set data.documents=true --set data.eot=10)
run() { mt_train "$1" "$2" "${common[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
for preset in tiny tiny-llama; do
  p=(--set model.preset=$preset)
  run ${preset}_ref 1 "${p[@]}"
  run ${preset}_pp2k4 2 "${p[@]}" --set parallel.pp=2 --set parallel.pp_token_slices=4
  run ${preset}_k2 1 "${p[@]}" --set parallel.pp_token_slices=2
  python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/${preset}_ref" "$WORK/${preset}_pp2k4" \
    "$WORK/${preset}_k2" --rtol 1e-5 --steps 10
done
echo "PASS: token slices with documents give the single-rank losses"
