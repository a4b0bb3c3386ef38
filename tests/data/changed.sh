# A token file that changes under the run (issue 23 item 4): cut short in
# place (reads of its mapping beyond the new end fault with SIGBUS), or
# modified in place at the same size. Each time every rank stops by itself
# with exit 3 and one line naming the file and what changed (no SIGBUS death,
# rc 135), and the newest checkpoint is the last one saved before the change:
# complete, and it verifies.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 400000)
NP=2
# run NAME CHANGE: a long run; once it has checkpointed twice, CHANGE (a
# shell command on $F) alters its data file
run() {
  local name=$1 change=$2 out="$WORK/$1" F="$WORK/$1.txt"
  cp "$corpus" "$F"
  set +e
  mt_mpirun_each $NP "$WORK/$name.exits" "$MT_BIN/meshtrain" --set model.preset=tiny --set train.steps=100000 --set parallel.dp=$NP \
    --set train.global_batch=8 --set train.micro_batch=4 --set train.eval_every=0 \
    --set data.train="$F" --set ckpt.every=2 --set ckpt.keep=2 --set output.dir="$out" \
    > "$WORK/$name.log" 2>&1 &
  local pid=$!
  set -e
  # (by `latest`: with ckpt.keep = 2, step_4 itself is gone by step 8)
  saved() { local n; n=$(sed -n 's/^step_//p' "$out/checkpoints/latest" 2>/dev/null || true); [ "${n:-0}" -ge 4 ]; }
  while kill -0 $pid 2>/dev/null && ! saved; do sleep 0.1; done
  saved || { cat "$WORK/$name.log"; fail "$name: no second checkpoint"; }
  eval "$change"
  set +e; wait $pid; set -e
  mt_each_exited "$WORK/$name.exits" $NP 3 \
    || { tail -5 "$WORK/$name.log"; cat "$WORK/$name.exits"; fail "$name: not every rank exited with 3"; }
  [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] &&
    grep "^meshtrain: error:" "$WORK/$name.log" | grep -q "$F" \
    || { tail -5 "$WORK/$name.log"; fail "$name: want one error line naming $F"; }
  local last; last=$(cat "$out/checkpoints/latest")
  mt_mpirun 2 "$MT_BIN/meshckpt" verify "$out/checkpoints/$last" > "$WORK/$name.verify" \
    || { cat "$WORK/$name.verify"; fail "$name: the last checkpoint ($last) does not verify"; }
  ! ls -d "$out"/checkpoints/*.tmp-* 2>/dev/null || fail "$name: a save was left half done"
  echo "ok   $name: newest checkpoint $last verifies; $(grep '^meshtrain: error:' "$WORK/$name.log")"
}
# cut short to a page: the sampler's reads beyond it fault
run truncated 'truncate -s 4096 "$F"'
grep -q "cut short under the run\|changed size under the run" "$WORK/truncated.log" || fail "truncated: not said"
# the same size, other bytes
run modified 'printf "zzzz" | dd of="$F" bs=1 seek=1000 conv=notrunc status=none; touch -d "+1 hour" "$F"'
grep -q "modified under the run" "$WORK/modified.log" || fail "modified: not said"
echo PASS
