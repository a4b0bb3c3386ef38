# What a train job's layout is, and whether it fits, decided when the job is
# written. Needs no Slurm.
#  1. render and campaign price every job's layout with the plan's memory
#     check against one GPU of the system (meshplan --only on its hardware
#     profile): a 7B shape all data-parallel on 2 LEONARDO nodes is refused,
#     one line naming the job, the layout and the GiB (the GiB meshplan
#     counts), exit 2, nothing written; tp=4 of the same model is written;
#     a campaign with both is refused naming the point.
#  2. one meaning per word: `dp-only` is every rank data-parallel; `auto`
#     as a layout (render --layout, a sweep's layouts) is refused with one
#     line; parallel.layout = auto lets meshtrain plan, and every campaign
#     artefact (the printed table, manifest.json, point.json) names the
#     layout meshtrain --check planned for the point's ranks.
source "$(dirname "$0")/../scripts/common.sh"
GEN="python3 $MT_SRC/slurm/meshslurm.py"
source "$(dirname "$0")/common_leo.sh"
SEVENB=(--set model.preset=custom --set model.n_layer=32 --set model.n_embd=4096 --set model.n_head=32
  --set model.seq_len=4096 --set model.vocab_size=50304 --set train.global_batch=64
  --set train.micro_batch=1 --set parallel.zero=1)
LEO=(--system leonardo-booster --account A --bin "$MT_BIN" "${NODEV[@]}")
refused() {  # refused WHAT ARGS...: exit 2 and exactly one line on stderr
  local what=$1; shift
  set +e; $GEN "$@" > "$WORK/out" 2> "$WORK/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$WORK/out" "$WORK/err"; fail "$what: meshslurm exited $rc, expected 2"; }
  [ "$(wc -l < "$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "$what: not one error line"; }
  echo "$what: $(cat "$WORK/err")"
}

# 1. the 7B all data-parallel on 8 A100s of 64 GiB: meshplan counts it over
# (meshplan --only: its figures on stdout, one line that it does not fit, exit 2),
# priced in the device and precision the job gets from the profile
set +e; "$MT_BIN/meshplan" "${SEVENB[@]}" --set parallel.dp=8 "${PROFILE_SETS[@]}" \
  --hw leonardo-booster --only \
  > "$WORK/only.json" 2> "$WORK/only.err"; rc=$?; set -e
[ "$rc" = 2 ] || fail "meshplan --only of a layout that does not fit exited $rc, expected 2"
[ "$(wc -l < "$WORK/only.err")" = 1 ] && grep -q "^meshplan: error: the configured layout .* does not fit" "$WORK/only.err" ||
  fail "meshplan --only: '$(cat "$WORK/only.err")'"
want=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["fits"] == 0, r; print("%.1f" % (r["mem_bytes"] / 2**30))' "$WORK/only.json") ||
  fail "meshplan --only does not find dp=8 of the 7B over the 64 GiB"
refused "7B, dp-only" render train "${LEO[@]}" --nodes 2 --run-dir "$WORK/r7b" "${SEVENB[@]}"
grep -Eq "^meshslurm: error: job not written: train job r7b: layout dp8-tp1-pp1-cp1 needs $want GiB per GPU .*more than the 64 GiB of a leonardo-booster GPU" "$WORK/err" ||
  fail "the refusal does not name the job, the layout and its $want GiB"
[ ! -e "$WORK/r7b" ] || fail "a refused job left $WORK/r7b behind"
# the same model over tp=4 fits, and is written
$GEN render train "${LEO[@]}" --nodes 2 --run-dir "$WORK/r7b-tp4" --layout tp=4 "${SEVENB[@]}" > /dev/null 2> "$WORK/e" ||
  fail "tp=4 of the 7B refused: $(cat "$WORK/e")"
[ -f "$WORK/r7b-tp4/job.sh" ] || fail "tp=4: no job.sh"
# a campaign: the point that does not fit is named, nothing is written
cat > "$WORK/7b.ini" <<EOF
[campaign]
name = seven
system = leonardo-booster
nodes = 2
layouts = tp=4; dp-only
steps = 5
[set]
model.preset = custom
model.n_layer = 32
model.n_embd = 4096
model.n_head = 32
model.seq_len = 4096
model.vocab_size = 50304
train.global_batch = 64
train.micro_batch = 1
parallel.zero = 1
EOF
refused "campaign 7B" campaign "$WORK/7b.ini" --out "$WORK/c7b" --account A --bin "$MT_BIN" "${NODEV[@]}"
grep -Eq "^meshslurm: error: point n2-r8-dp8-tp1-pp1-cp1-rep0: layout dp8-tp1-pp1-cp1 needs $want GiB per GPU" "$WORK/err" ||
  fail "the campaign's refusal does not name the point and its GiB"
[ ! -e "$WORK/c7b/manifest.json" ] || fail "a refused campaign wrote its manifest"

# 2. auto is the planner's word: as a layout it is refused, pointing at dp-only
refused "render --layout auto" render train "${LEO[@]}" --nodes 1 --stdout --layout auto \
  --set model.preset=tiny --set train.global_batch=8
grep -q "spelled dp-only.*parallel.layout=auto" "$WORK/err" || fail "--layout auto: the line names neither word"
sed -e 's/^layouts = .*/layouts = auto/' "$WORK/7b.ini" > "$WORK/auto.ini"
refused "sweep layouts = auto" campaign "$WORK/auto.ini" --out "$WORK/cauto" --account A --bin "$MT_BIN" "${NODEV[@]}"
grep -q "auto.ini: layouts entry 'auto': every rank data-parallel is spelled dp-only" "$WORK/err" ||
  fail "layouts = auto: the line does not say dp-only"
# an explicit layout beside the planner: one of the two
refused "--layout and the planner" render train "${LEO[@]}" --nodes 1 --stdout --layout tp=2 \
  --set model.preset=tiny --set train.global_batch=8 --set parallel.layout=auto
# the planner in a campaign: each point records the layout meshtrain planned for its ranks
cat > "$WORK/plan.ini" <<EOF
[campaign]
name = planned
system = local
ranks = 1, 4
tasks_per_node = 4
steps = 3
[set]
model.preset = tiny
train.global_batch = 16
parallel.layout = auto
plan.hw = $MT_SRC/tests/plan/cost-test.ini
data.train = $(mt_corpus 100000)
EOF
$GEN campaign "$WORK/plan.ini" --out "$WORK/cplan" --bin "$MT_BIN" > "$WORK/table" 2> "$WORK/e" ||
  fail "planned campaign: $(cat "$WORK/e")"
cat "$WORK/table"
for ranks in 1 4; do
  text=$("$MT_BIN/meshtrain" --check --ranks "$ranks" --set model.preset=tiny --set train.global_batch=16 \
    --set parallel.layout=auto --set plan.hw="$MT_SRC/tests/plan/cost-test.ini" |
    sed -n 's/.*parallel\.layout = auto on [0-9]* ranks ([^)]*): \([^ ]*\), predicted.*/\1/p')
  [ -n "$text" ] || fail "meshtrain --check printed no planned layout for $ranks ranks"
  python3 - "$WORK/cplan" "$ranks" "$text" <<'PY' || fail "the campaign's layout of $ranks ranks is not meshtrain's"
import json, os, sys
out, ranks, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kv = dict(x.split("=") for x in text.split(","))
want = "auto:dp%s-tp%s-pp%s-cp%s-zero%s-mb%s-sp%s-recompute%s-schedule%s-v%s" % tuple(
    kv[k] for k in ("dp", "tp", "pp", "cp", "zero", "mb", "sp", "recompute", "schedule", "v"))
man = json.load(open(os.path.join(out, "manifest.json")))
pts = [p for p in man["points"] if p["ranks"] == ranks]
assert len(pts) == 1, pts
assert pts[0]["layout_name"] == want, (pts[0]["layout_name"], want)
point = json.load(open(os.path.join(out, pts[0]["dir"], "point.json")))
assert point["layout_name"] == want, (point["layout_name"], want)
job = open(os.path.join(out, pts[0]["dir"], "job.sh")).read()
assert "parallel.layout=auto" in job and "parallel.dp=" not in job, "the job does not plan itself"
table = open(os.path.join(os.path.dirname(out), "table")).read()
assert any(pts[0]["id"] in l and l.rstrip().endswith(want) for l in table.splitlines()), table
print("ok   %d ranks: %s in the table, manifest.json, point.json" % (ranks, want))
PY
done
echo PASS
