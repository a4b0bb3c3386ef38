# meshplan's memory in the run's dtypes: on a bf16 profile (act_bytes = 2)
# each category of meshtrain --plan's fp32 counts is rescaled as mixed
# precision holds it: the bf16 weights copy of the parameters held and the
# fp32 master of the elements this rank updates; fp32 gradients and
# moments; activations and comm buffers at 2 bytes. Checked for tiny on 2
# ranks (ZeRO-1, ZeRO-3) and 2 pipeline stages; --dtype grads=2 halves the
# gradients alone; plan.headroom decides what fits.
source "$(dirname "$0")/../scripts/common.sh"
prof="$WORK/bf16.ini"
sed 's/^mem_gib = .*/mem_gib = 0.25\nact_bytes = 2/' "$MT_SRC/tests/plan/cost-test.ini" > "$prof"
common=(--set model.preset=tiny --set train.global_batch=8 --set train.micro_batch=2)
for c in "z1 --set parallel.dp=2 --set parallel.zero=1" "z3 --set parallel.dp=2 --set parallel.zero=3" \
         "pp2 --set parallel.pp=2"; do
  read -r name args <<< "$c"
  # shellcheck disable=SC2086
  "$MT_BIN/meshtrain" "${common[@]}" $args --plan-json "$WORK/$name.plan.json" > /dev/null || fail "plan $name"
  # shellcheck disable=SC2086
  "$MT_BIN/meshplan" "${common[@]}" $args --hw "$prof" --only > "$WORK/$name.bf16.json" || fail "meshplan $name"
  # shellcheck disable=SC2086
  "$MT_BIN/meshplan" "${common[@]}" $args --hw "$prof" --only --dtype grads=2 > "$WORK/$name.g2.json" \
    || fail "meshplan $name --dtype"
done
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
for name in ("z1", "z3", "pp2"):
    plan = json.load(open("%s/%s.plan.json" % (work, name)))["ranks"]
    got = json.load(open("%s/%s.bf16.json" % (work, name)))["mem"]
    g2 = json.load(open("%s/%s.g2.json" % (work, name)))["mem"]
    firsts = [p["mem_bytes"] for p in plan if p["dp"] == 0 and p["tp"] == 0]
    def want(cat):
        def one(m):
            if cat == "params":  # bf16 copy of what is held + fp32 master of what is updated
                return m["params"] / 4 * 2 + m["optimizer"] / 8 * 4
            scale = {"grads": 1, "optimizer": 1, "gathered": 0.5, "activations": 0.5,
                     "comm": 0.5, "other": 1}[cat]
            return m[cat] * scale
        return max(one(m) for m in firsts)
    for cat in ("params", "grads", "optimizer", "gathered", "activations", "comm"):
        if not abs(got[cat] - want(cat)) <= 1e-9 * max(1.0, want(cat)):
            sys.exit("FAIL: %s %s: meshplan %r, the plan rescaled %r" % (name, cat, got[cat], want(cat)))
    if not (abs(g2["grads"] - got["grads"] / 2) <= 1e-9 * got["grads"] and g2["params"] == got["params"]):
        sys.exit("FAIL: %s: --dtype grads=2 gives grads %r (want %r)" % (name, g2["grads"], got["grads"] / 2))
    print("%-4s bf16 params %d grads %d optimizer %d activations %d (fp32 plan: %d %d %d %d)" % (
        name, got["params"], got["grads"], got["optimizer"], got["activations"],
        max(m["params"] for m in firsts), max(m["grads"] for m in firsts),
        max(m["optimizer"] for m in firsts), max(m["activations"] for m in firsts)))
PY
# plan.headroom: the same layout fits with none and not with more than the device
"$MT_BIN/meshplan" "${common[@]}" --set parallel.dp=2 --set parallel.zero=1 --hw "$prof" --only \
  --set plan.headroom=0 | grep -q '"fits": 1' || fail "does not fit without headroom"
# (--only exits 2 on a layout that does not fit: its figures still on stdout)
{ "$MT_BIN/meshplan" "${common[@]}" --set parallel.dp=2 --set parallel.zero=1 --hw "$prof" --only \
  --set plan.headroom=0.25 || [ $? = 2 ]; } | grep -q '"fits": 0' || fail "fits with all of the device as headroom"
echo PASS
