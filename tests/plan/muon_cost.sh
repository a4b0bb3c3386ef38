# optim.name = muon in the cost model (issue 42 item 2): for tiny and
# gpt2-124m on 8 ranks (dp 4 x tp 2, ZeRO-1, bf16; gpt2-124m also at
# ZeRO-0, where Muon's matrices are gathered after the update) on the
# h100-sxm profile, meshplan prices the optimizer step under Muon (the busiest owner's
# Newton-Schulz matmuls, the exchange's all-to-alls, the momentum) above
# AdamW's, reports its parts (optim_ns_s, optim_exchange_s,
# optim_momentum_s, summing to no more than optim_s) and the Muon bytes
# apart from dp's and tp's; against the virtual device's emulation of the
# same runs (8 virtual ranks of the same profile), the predicted step under
# Muon is within 15% of the emulated one (AdamW's own prediction of tiny is
# 10% under its emulation: the test holds the same bound to both), and
# what Muon adds to the step (its step less AdamW's) within 10% of what
# it adds in the emulation.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 400000)
for c in tiny:1 gpt2-124m:1 gpt2-124m:0; do
  preset=${c%:*} zero=${c#*:} name=${c/:/_z}
  M=(--set model.preset=$preset --set parallel.dp=4 --set parallel.tp=2 --set parallel.zero=$zero
     --set train.global_batch=16 --set train.micro_batch=2 --set train.precision=bf16
     --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none --set train.steps=3)
  for o in adamw muon; do
    "$MT_BIN/meshplan" "${M[@]}" --set optim.name=$o --hw h100-sxm --only \
      > "$WORK/plan_${name}_$o.json" || fail "meshplan $name $o"
    mt_train "${name}_$o" 8 "${M[@]}" --set optim.name=$o --set train.device=virtual \
      --set train.virtual_hw=h100-sxm --set output.dir="$WORK/${name}_$o"
  done
done
python3 - "$WORK" <<'PY' || fail "the planner's Muon against the emulation"
import json, sys
w = sys.argv[1]
bad = 0
for preset in ("tiny_z1", "gpt2-124m_z1", "gpt2-124m_z0"):
    plan, run = {}, {}
    for o in ("adamw", "muon"):
        plan[o] = json.load(open(f"{w}/plan_{preset}_{o}.json"))
        steps = [json.loads(l)["step_s"] for l in open(f"{w}/{preset}_{o}/metrics.jsonl")]
        run[o] = sum(steps) / len(steps)
    p, a = plan["muon"], plan["adamw"]
    parts = p["optim_ns_s"] + p["optim_exchange_s"] + p["optim_momentum_s"]
    err = abs(p["step_s"] - run["muon"]) / run["muon"]
    added, added_run = p["step_s"] - a["step_s"], run["muon"] - run["adamw"]
    err_added = abs(added - added_run) / added_run
    print(f"     {preset}: optimizer {1e6 * a['optim_s']:.2f} us (AdamW), {1e6 * p['optim_s']:.2f} us "
          f"(Muon: Newton-Schulz {1e6 * p['optim_ns_s']:.2f}, exchange {1e6 * p['optim_exchange_s']:.2f}, "
          f"momentum {1e6 * p['optim_momentum_s']:.2f}); step planned {1e3 * p['step_s']:.4f} ms, "
          f"emulated {1e3 * run['muon']:.4f} ms ({100 * err:.1f}%); Muon adds {1e6 * added:.2f} us, "
          f"emulated {1e6 * added_run:.2f} us ({100 * err_added:.1f}%)")
    if not p["optim_s"] > a["optim_s"]:
        print(f"FAIL: {preset}: Muon's optimizer step priced at no more than AdamW's"); bad += 1
    if not (p["optim_ns_s"] > 0 and p["optim_exchange_s"] > 0 and p["optim_momentum_s"] > 0 and
            parts <= p["optim_s"] * (1 + 1e-9)):
        print(f"FAIL: {preset}: the optimizer's parts {parts} against optim_s {p['optim_s']}"); bad += 1
    if not (p["optim_flops"] > 0 and p["muon_bytes"]["dp"] > 0 and p["muon_bytes"]["tp"] > 0):
        print(f"FAIL: {preset}: no Muon FLOPs or bytes reported"); bad += 1
    # the Muon bytes are apart: the dp and tp bytes are AdamW's
    if not (p["step_bytes"]["tp"] == a["step_bytes"]["tp"]):
        print(f"FAIL: {preset}: tp bytes {p['step_bytes']['tp']} under Muon, {a['step_bytes']['tp']} under AdamW"); bad += 1
    if not err <= 0.15:
        print(f"FAIL: {preset}: the planned step is not within 15% of the emulation's"); bad += 1
    if not err_added <= 0.10:
        print(f"FAIL: {preset}: what Muon adds is not within 10% of the emulation's"); bad += 1
sys.exit(1 if bad else 0)
PY
echo PASS
