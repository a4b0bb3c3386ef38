# meshdata tokenize (issue 38): text and JSONL through a Hugging Face
# tokenizer.json into llm.c shards. With 2 workers and with 1 the shards are
# the same bytes; they hold what tokenizer.encode gives, document by
# document, and decode back to the documents; version 1 (uint16) for a small
# vocabulary, version 2 (uint32, ids above 65535) for a large one; meshdata
# info reads a shard and meshtrain trains on it; each refusal is one line,
# exit 2, and leaves nothing.
source "$(dirname "$0")/../scripts/common.sh"
python3 -c "import tokenizers" 2> /dev/null || {
  echo "SKIP: python3 cannot import tokenizers (apps/scripts/setup.sh installs it: python3 -m pip install tokenizers)"
  exit 77; }
H=("${MT_GUARD[@]}" python3 "$MT_SRC/tests/data/tokenize_check.py")
tokenize() { mt_guard "$MT_BIN/meshdata" tokenize "$@"; }
corpus=$(mt_corpus 300000)
IN=$WORK/in
"${H[@]}" inputs "$corpus" "$IN"
"${H[@]}" train "$corpus" "$WORK/tok.json" --vocab 512
# small work units: the files are cut into many, out of order across workers
export MESHDATA_TOKENIZE_UNIT_BYTES=16384
ARGS=("$IN/txt" "$IN/data/*.jsonl*" --field body --tokenizer "$WORK/tok.json"
      --shard-tokens 20000 --val-docs 3)

tokenize "${ARGS[@]}" --out "$WORK/w2" --workers 2 | tee "$WORK/w2.log"
"${H[@]}" check "$WORK/w2" "$WORK/tok.json" "$IN/docs.json" --version 1
tokenize "${ARGS[@]}" --out "$WORK/w1" --workers 1 | tee "$WORK/w1.log"
diff -r "$WORK/w1" "$WORK/w2" || fail "1 worker and 2 workers wrote different shards"
echo "ok   1 worker and 2 workers: the same bytes"

"$MT_BIN/meshdata" info "$WORK/w2/tokens_000000.bin" > "$WORK/info.txt"
grep -q "^format: *llmc$" "$WORK/info.txt" && grep -q "^tokens: *20000$" "$WORK/info.txt" \
  || { cat "$WORK/info.txt"; fail "meshdata info does not read a full version-1 shard"; }
mt_train train 1 --set model.preset=tiny --set model.vocab_size=512 --set train.steps=2 \
  --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=0 \
  --set ckpt.mode=none --set data.train="$WORK/w2/tokens_000000.bin" --set output.dir="$WORK/train"
[ "$(wc -l < "$WORK/train/metrics.jsonl")" -eq 2 ] || fail "meshtrain did not train 2 steps"
echo "ok   meshdata info and meshtrain read a version-1 shard"

# one document per line
tokenize "$IN/lines.txt" --lines --tokenizer "$WORK/tok.json" --out "$WORK/lines" --workers 2
"${H[@]}" check "$WORK/lines" "$WORK/tok.json" "$IN/lines.json" --version 1

# a vocabulary beyond 65536: uint32 tokens, ids above 65535 among them
"${H[@]}" inputs "$corpus" "$WORK/in_big" --added 65100
"${H[@]}" train "$corpus" "$WORK/big.json" --vocab 512 --added 65100
tokenize "$WORK/in_big/txt" "$WORK/in_big/data/*.jsonl*" --field body --tokenizer "$WORK/big.json" \
  --out "$WORK/big" --workers 2
"${H[@]}" check "$WORK/big" "$WORK/big.json" "$WORK/in_big/docs.json" --version 2

# an end-of-text token named, where the tokenizer has none of the usual ones
"${H[@]}" train "$corpus" "$WORK/eos.json" --vocab 300 --special "<eos>"
tokenize "$IN/txt" --tokenizer "$WORK/eos.json" --eot-token "<eos>" --out "$WORK/eos" > /dev/null
python3 -c "import json, sys; m = json.load(open(sys.argv[1])); assert m['tokenizer']['eot_token'] == '<eos>'" \
  "$WORK/eos/manifest.json" || fail "--eot-token <eos> not used"

# refused NAME WANT OUT ARGS...: exit 2, one line that matches WANT, OUT
# (absent before, or a non-empty directory) as it was, no temporary left
refused() {
  local name=$1 want=$2 out=$3 before rc; shift 3
  before=$(ls -A "$out" 2> /dev/null || true)
  set +e
  tokenize "$@" --out "$out" > "$WORK/$name.out" 2> "$WORK/$name.err"
  rc=$?
  set -e
  [ $rc -eq 2 ] || { cat "$WORK/$name.err"; fail "$name: exit $rc, want 2"; }
  [ "$(wc -l < "$WORK/$name.err")" -eq 1 ] && grep -q "^meshdata: error: .*$want" "$WORK/$name.err" \
    || { cat "$WORK/$name.err"; fail "$name: not one line saying '$want'"; }
  [ "$(ls -A "$out" 2> /dev/null || true)" = "$before" ] || fail "$name: $out changed"
  ! ls -d "$(dirname "$out")"/.*.tmp-* 2> /dev/null || fail "$name: a temporary directory is left"
  echo "ok   $name: $(cat "$WORK/$name.err")"
}
R=$WORK/refused
mkdir -p "$R"
T=(--tokenizer "$WORK/tok.json")
refused missing "in/nope.jsonl': no such file" "$R/out" "$IN/nope.jsonl" "${T[@]}"
refused no_match "matches no file" "$R/out" "$IN/*.parquet" "${T[@]}"
# a bad line far into the file: in a later work unit, counted from the file's start
bad=$R/bad.jsonl
{ head -n 999 "$IN/data/docs.jsonl"; echo '{"body": "cut'; cat "$IN/data/docs.jsonl"; } > "$bad"
refused not_json "bad.jsonl:1000: not JSON" "$R/out" "$bad" --field body "${T[@]}" --workers 2
{ head -n 999 "$IN/data/docs.jsonl"; echo '{"text": "no body"}'; } > "$bad"
refused no_field "bad.jsonl:1000: no string field 'body'" "$R/out" "$bad" --field body "${T[@]}"
echo '{"model": 3}' > "$R/bad_tok.json"
refused bad_tokenizer "bad_tok.json' does not load" "$R/out" "$IN/txt" --tokenizer "$R/bad_tok.json"
mkdir -p "$R/full" && echo keep > "$R/full/keep"
refused out_not_empty "exists and is not empty" "$R/full" "$IN/txt" "${T[@]}"
refused vocab_limit "vocabulary (512) is larger than --vocab-limit 300" "$R/out" "$IN/txt" "${T[@]}" \
  --vocab-limit 300
refused no_eot "name its end-of-text token with --eot-token" "$R/out" "$IN/txt" \
  --tokenizer "$WORK/eos.json"
refused shard_tokens "--shard-tokens 2147483648: want 1 .. 2147483647" "$R/out" "$IN/txt" "${T[@]}" \
  --shard-tokens 2147483648
# --overwrite replaces a non-empty directory
tokenize "$IN/txt" "${T[@]}" --out "$R/full" --overwrite > /dev/null
[ ! -e "$R/full/keep" ] && [ -f "$R/full/tokens_000000.bin" ] || fail "--overwrite did not replace"
echo PASS
