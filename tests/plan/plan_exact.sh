# meshplan's memory and bytes are meshtrain --plan's, exactly: for the
# layouts meshplan enumerates for PRESET (tiny, small) on 1 and 2 nodes of a
# 4-device test profile (an even sample of about 60 per node count, and
# the first 10 context-parallel ones), the largest first rank (dp 0, tp 0) of any stage in
# `meshtrain --plan-json` holds the bytes meshplan lists by category and
# sends the bytes it lists per group; every listed layout passes
# `meshtrain --check` for its ranks; none listed as fitting exceeds the
# profile's memory.
MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
preset=$1 extra=()
# tiny_moe: tiny with 4 experts (top-2) in every block: ep layouts too
if [ "$preset" = tiny_moe ]; then preset=tiny; extra=(--set model.moe_experts=4 --set model.moe_topk=2); fi
prof="$MT_SRC/tests/plan/cost-test.ini"
for nodes in 1 2; do
  "$MT_BIN/meshplan" --set model.preset="$preset" "${extra[@]}" --set train.global_batch=16 --hw "$prof" \
    --set plan.cp_min_tokens=0 --nodes $nodes --top 5 --all --json "$WORK/n$nodes.json" \
    > "$WORK/n$nodes.txt" 2>&1 \
    || { cat "$WORK/n$nodes.txt"; fail "meshplan $preset on $nodes nodes"; }
  head -8 "$WORK/n$nodes.txt"
done
python3 - "$WORK" "$MT_BIN" "$preset" "${extra[@]}" <<'PY'
import json, subprocess, sys
work, bindir, preset = sys.argv[1:4]
extra = [a for a in sys.argv[4:] if a != "--set"]
cats = ["params", "grads", "optimizer", "gathered", "activations", "comm", "other"]
bad = checked = 0
for nodes in (1, 2):
    rows = json.load(open("%s/n%d.json" % (work, nodes)))
    assert rows, "no layouts listed"
    # an even sample of about 60 per node count (each costs two meshtrain
    # processes), and the first 10 context-parallel ones
    step = max(1, len(rows) // 60)
    cps = [i for i, r in enumerate(rows) if r["cp"] > 1][:10] + \
          [i for i, r in enumerate(rows) if r["ep"] > 1][:10] + \
          [i for i, r in enumerate(rows) if r["pp_first_layers"] > 0][:10]
    sample = [r for i, r in enumerate(rows) if i % step == 0 or i in cps]
    for r in sample:
        sets = ["model.preset=%s" % preset, "train.global_batch=16", "parallel.tp=%d" % r["tp"],
                "parallel.pp=%d" % r["pp"], "parallel.dp=%d" % r["dp"], "parallel.cp=%d" % r["cp"],
                "parallel.zero=%d" % r["zero"], "train.micro_batch=%d" % r["micro_batch"],
                "parallel.sp=%s" % ("true" if r["sp"] else "false"),
                "train.recompute=%s" % ("true" if r["recompute"] else "false"),
                "parallel.schedule=%s" % r["schedule"], "parallel.virtual_stages=%d" % r["virtual_stages"],
                "parallel.ep=%d" % r["ep"], "parallel.pp_first_layers=%d" % r["pp_first_layers"],
                "parallel.pp_last_layers=%d" % r["pp_last_layers"]] + extra
        args = sum((["--set", s] for s in sets), [])
        world = r["tp"] * r["pp"] * r["dp"] * r["cp"]
        chk = subprocess.run([bindir + "/meshtrain", "--check", "--ranks", str(world)] + args,
                             capture_output=True, text=True)
        if chk.returncode != 0:
            print("FAIL: listed layout refused by meshtrain --check: %s: %s" % (sets, chk.stderr.strip()))
            bad += 1
            continue
        out = "%s/plan.json" % work
        subprocess.run([bindir + "/meshtrain", "--plan", "--plan-json", out] + args, check=True,
                       capture_output=True)
        plan = json.load(open(out))["ranks"]
        firsts = [p for p in plan if p["dp"] == 0 and p["tp"] == 0]
        for c in cats:
            want = max(p["mem_bytes"][c] for p in firsts)
            if not r["mem"][c] == want:
                print("FAIL: %s: %s %r, meshtrain --plan %r" % (sets, c, r["mem"][c], want))
                bad += 1
        for g in ("dp", "tp", "pp"):
            want = max(p["step_bytes"][g] for p in firsts)
            if not r["step_bytes"][g] == want:
                print("FAIL: %s: %s bytes %r, meshtrain --plan %r" % (sets, g, r["step_bytes"][g], want))
                bad += 1
        total = max(sum(p["mem_bytes"][c] for c in cats) for p in firsts)
        if r["fits"] and not total <= 0.25 * 2**30:
            print("FAIL: %s listed as fitting with %d bytes" % (sets, total))
            bad += 1
        checked += 1
print("%s: %d listed layouts checked against meshtrain --check and --plan" % (preset, checked))
sys.exit(1 if bad else 0)
PY
echo PASS
