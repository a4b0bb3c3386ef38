# optim.name = muon in the plan (issue 42 items 2 and 4): for tiny at dp 2
# ZeRO 0, 1 and 3, dp 2 x tp 2 (the shard axis's exchange), dp 2 x pp 2,
# dp 2 x cp 2 and a MoE (4 experts, top-4) at ep 2 x edp 2 (the experts' own
# reduction group) and dp 2 x tp 2 with ep 2 x etp 2 (their shard axis), `meshtrain --plan-json` predicts every rank's
# Newton-Schulz FLOPs (optimizer_flops) and its exchange's bytes per group
# (muon_bytes: dp x cp, tp, edp, etp) and the run's summary.json
# (ranks[].optimizer_flops, last_step_muon_bytes) holds the same, exactly,
# with memory and bytes per group as zero.plan_tiny compares them. The
# exchange sends bytes on dp (and tp, edp where they have ranks); the
# owners' FLOPs add up to the matrices' and the busiest is at least the
# mean; --plan prints the assignment with the Muon bytes apart.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 400000)
common=(--set model.preset=tiny --set train.steps=2 --set train.global_batch=8
        --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none
        --set optim.name=muon)
moe=(--set model.moe_experts=4 --set model.moe_topk=4) # k = E: a balanced routing (exact ep bytes)
cases=("z0 2 --set parallel.dp=2 --set parallel.zero=0 --set train.micro_batch=2"
       "z1 2 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2"
       "z3 2 --set parallel.dp=2 --set parallel.zero=3 --set train.micro_batch=2"
       "tp2 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=1 --set train.micro_batch=2"
       "pp2 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=1 --set train.micro_batch=2"
       "cp2 4 --set parallel.dp=2 --set parallel.cp=2 --set parallel.zero=2 --set train.micro_batch=2"
       "ep2 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2 ${moe[*]}"
       "etp2 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.ep=2 --set parallel.etp=2 --set train.micro_batch=2 ${moe[*]}")
for c in "${cases[@]}"; do mt_plan_and_train "$c" "${common[@]}"; done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,cp,ep,etp,edp "${cases[@]}" ||
  fail "plan and run differ"
python3 - "$WORK" <<'PY' || fail "Muon's figures"
import json, sys
w = sys.argv[1]
for case, groups in (("z0", ["dp"]), ("z3", ["dp"]), ("tp2", ["dp", "tp"]), ("cp2", ["dp"]),
                     ("ep2", ["dp", "edp"]), ("etp2", ["dp", "tp", "etp"])):
    ranks = json.load(open(f"{w}/{case}.plan.json"))["ranks"]
    for g in groups:
        if not max(r["muon_bytes"][g] for r in ranks) > 0:
            sys.exit(f"FAIL: {case}: no Muon bytes on {g}")
    for r in ranks:
        if not r["optimizer_flops_busiest"] >= r["optimizer_flops_mean"] > 0:
            sys.exit(f"FAIL: {case} rank {r['rank']}: busiest below the mean or no FLOPs")
        if not r["muon_bytes"]["dp"] <= r["step_bytes"]["dp"]:
            sys.exit(f"FAIL: {case}: the Muon bytes are not within the group's")
    # every stage's owners together hold the stage's matrices' FLOPs: the
    # mean of its ranks' owned FLOPs is the engine's mean
    for st in set(r["pp"] for r in ranks):
        own = [r for r in ranks if r["pp"] == st]
        mean = sum(r["optimizer_flops"] for r in own) / len(own)
        if not abs(mean - own[0]["optimizer_flops_mean"]) <= 1e-9 * mean:
            sys.exit(f"FAIL: {case} stage {st}: owned FLOPs' mean {mean}, the engine's "
                     f"{own[0]['optimizer_flops_mean']}")
    print(f"ok   {case}: rank 0 owns {ranks[0]['optimizer_flops']:.0f} FLOPs, "
          f"busiest/mean {ranks[0]['optimizer_flops_busiest'] / ranks[0]['optimizer_flops_mean']:.3f}, "
          f"Muon bytes {ranks[0]['muon_bytes']}")
PY
grep -q "^# optimizer: Muon" "$WORK/tp2.plan.txt" && grep -q "muon tp" "$WORK/tp2.plan.txt" ||
  { cat "$WORK/tp2.plan.txt"; fail "--plan prints no Muon assignment"; }
grep -q '"mfu_model_plus_optimizer"' "$WORK/z1/summary.json" ||
  fail "summary.json has no mfu_model_plus_optimizer"
echo PASS
