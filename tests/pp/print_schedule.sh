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
echo PASS
