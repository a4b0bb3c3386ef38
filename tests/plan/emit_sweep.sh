# meshplan --emit-sweep writes the fastest fitting layouts as a campaign that
# slurm/meshslurm.py takes as is: `campaign --dry-run` plans one point per
# layout, each checked by meshtrain --check for its ranks, with the layout's
# ZeRO level, micro-batch, schedule and recompute as the point's settings.
source "$(dirname "$0")/../scripts/common.sh"
"$MT_BIN/meshplan" "$MT_SRC/inputs/default.ini" --set model.preset=tiny --set train.global_batch=16 \
  --hw "$MT_SRC/tests/plan/cost-test.ini" --nodes 1 --top 3 --emit-sweep "$WORK/sweep.ini" \
  --system local > "$WORK/plan.txt" || { cat "$WORK/plan.txt"; fail "meshplan"; }
cat "$WORK/sweep.ini"
[ "$(grep -c '^layouts = ' "$WORK/sweep.ini")" -eq 1 ] || fail "no layouts line"
n=$(grep '^layouts = ' "$WORK/sweep.ini" | tr ';' '\n' | grep -c 'tp=')
[ "$n" -eq 3 ] || fail "expected 3 layouts, got $n"
# (the data file is checked too: the test's own corpus)
python3 "$MT_SRC/slurm/meshslurm.py" campaign "$WORK/sweep.ini" --out "$WORK/campaign" --dry-run --bin "$MT_BIN" \
  --set data.train="$(mt_corpus 100000)" > "$WORK/campaign.txt" 2>&1 || { cat "$WORK/campaign.txt"; fail "campaign refused the sweep"; }
cat "$WORK/campaign.txt" | head -20
grep -q "3 points" "$WORK/campaign.txt" || fail "the campaign did not plan 3 points"
grep -q "meshtrain --check: 3 distinct configurations OK" "$WORK/campaign.txt" || fail "points not checked"
[ "$(grep -c '^  n1-r4-dp.*-zero[0-3]-mb[0-9]*-' "$WORK/campaign.txt")" -eq 3 ] \
  || fail "points do not carry the layouts' settings"
echo PASS
