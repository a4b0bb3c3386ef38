# meshtrain --print-schedule prints every pipeline rank's op list on one
# process (no pipeline ranks launched) and exits 0 without writing output.
source "$(dirname "$0")/../scripts/common.sh"
"$MT_BIN/meshtrain" --set model.preset=tiny --set model.n_layer=4 --set parallel.pp=4 \
  --set train.global_batch=8 --set train.micro_batch=1 --set parallel.schedule=zb-h1 \
  --set output.dir="$WORK/out" --print-schedule > "$WORK/out.txt" || fail "exit code $?"
head -5 "$WORK/out.txt"
[ "$(grep -c '^# schedule zb-h1, pp = 4, micro_batches = 8' "$WORK/out.txt")" -eq 4 ] || fail "expected 4 rank headers"
# every rank: 8 F, 8 BI, 8 BW; sends and receives as the stage needs
[ "$(grep -c '^F ' "$WORK/out.txt")" -eq 32 ] || fail "expected 32 forwards"
[ "$(grep -c '^BW ' "$WORK/out.txt")" -eq 32 ] || fail "expected 32 weight-gradient passes"
[ "$(grep -c '^SA ' "$WORK/out.txt")" -eq 24 ] || fail "expected 24 activation sends"
grep -q "simulated bubble" "$WORK/out.txt" || fail "no simulated bubble line"
[ ! -e "$WORK/out" ] || fail "output written"
# zb-v at pp 2 (V: rank 0 holds virtual stages 0 and 3, rank 1 stages 1 and
# 2): per rank 16 F, 16 BI, 16 BW; activations cross ranks at 0->1 and 2->3
# only (8 each; 1->2 is the turn of the V, on rank 1)
"$MT_BIN/meshtrain" --set model.preset=tiny --set model.n_layer=4 --set parallel.pp=2 \
  --set train.global_batch=8 --set train.micro_batch=1 --set parallel.schedule=zb-v \
  --set parallel.virtual_stages=2 --set output.dir="$WORK/out" --print-schedule \
  > "$WORK/zbv.txt" || fail "zb-v: exit code $?"
[ "$(grep -c '^# schedule zb-v, pp = 2, micro_batches = 8, virtual_stages = 2' "$WORK/zbv.txt")" -eq 2 ] \
  || fail "zb-v: expected 2 rank headers"
[ "$(grep -c '^F ' "$WORK/zbv.txt")" -eq 32 ] || fail "zb-v: expected 32 forwards"
[ "$(grep -c '^BW ' "$WORK/zbv.txt")" -eq 32 ] || fail "zb-v: expected 32 weight passes"
[ "$(grep -c '^SA ' "$WORK/zbv.txt")" -eq 16 ] || fail "zb-v: expected 16 activation sends"
grep "simulated bubble" "$WORK/zbv.txt"
# breadth-first at pp 2, v 2: every forward of chunk 0 before the first of chunk 1
"$MT_BIN/meshtrain" --set model.preset=tiny --set model.n_layer=4 --set parallel.pp=2 \
  --set train.global_batch=8 --set train.micro_batch=1 --set parallel.schedule=breadth-first \
  --set parallel.virtual_stages=2 --set output.dir="$WORK/out" --print-schedule \
  > "$WORK/bf.txt" || fail "breadth-first: exit code $?"
awk '/^# schedule/ {r++} /^F / {split($3, c, "="); if (c[2] == 1) seen1[r] = 1;
     else if (seen1[r]) bad = 1} END {exit bad}' "$WORK/bf.txt" \
  || fail "breadth-first: a chunk-0 forward after a chunk-1 forward"
[ "$(grep -c '^F ' "$WORK/bf.txt")" -eq 32 ] || fail "breadth-first: expected 32 forwards"
[ ! -e "$WORK/out" ] || fail "output written"
# token slices at pp 2, 2 micro-batches of 2 slices: 8 forwards a rank, the
# last rank backs each micro-batch's slices in reverse right after its last
# slice's forward
"$MT_BIN/meshtrain" --set model.preset=tiny --set model.n_layer=4 --set parallel.pp=2 \
  --set train.global_batch=2 --set train.micro_batch=1 --set parallel.pp_token_slices=2 \
  --set output.dir="$WORK/out" --print-schedule > "$WORK/sl.txt" || fail "slices: exit code $?"
grep -q '^# schedule 1f1b, pp = 2, micro_batches = 2, virtual_stages = 1, token slices = 2, rank 1' \
  "$WORK/sl.txt" || fail "slices: no rank 1 header"
[ "$(grep -c '^F mb=[01] slice=[01] chunk=0' "$WORK/sl.txt")" -eq 8 ] || fail "slices: expected 8 forwards"
sed -n '/rank 1:/,$p' "$WORK/sl.txt" | grep -E '^(F|B) ' | head -4 | tr '\n' ' ' |
  grep -q "^F mb=0 slice=0 chunk=0 F mb=0 slice=1 chunk=0 B mb=0 slice=1 chunk=0 F mb=1 slice=0" \
  || fail "slices: rank 1's order: $(sed -n '/rank 1:/,$p' "$WORK/sl.txt" | grep -E '^(F|B) ' | head -4)"
echo PASS
