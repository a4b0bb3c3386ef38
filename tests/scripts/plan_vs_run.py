"""Every rank's allocator peaks and last-step bytes per group (a run's
summary.json) against meshtrain --plan-json, exactly.

  plan_vs_run.py WORK GROUPS CASE...

WORK/CASE.plan.json and WORK/CASE/summary.json for each CASE (its first
word); GROUPS: the comm groups to compare, comma-separated (dp,tp,pp,cp or
with the MoE groups). comm memory is compared where the plan says it is
exact. Under optim.name = muon also each rank's Newton-Schulz FLOPs
(optimizer_flops) and its exchange's bytes per group (muon_bytes). Prints
rank 0's figures per case; exits 1 on any difference."""
import json
import sys

CATS = ["params", "grads", "optimizer", "gathered", "activations", "comm"]


def compare(work, case, groups):
    plan = json.load(open("%s/%s.plan.json" % (work, case)))
    run = json.load(open("%s/%s/summary.json" % (work, case)))
    ranks = {r["rank"]: r for r in run["ranks"]}
    if len(ranks) != len(plan["ranks"]):
        sys.exit("FAIL: %s: %d ranks ran, the plan has %d" % (case, len(ranks), len(plan["ranks"])))
    bad = 0
    for p in plan["ranks"]:
        r = ranks[p["rank"]]
        for c in CATS:
            if c == "comm" and not p["comm_exact"]:
                continue
            got, want = r["mem_peak_bytes"][c], p["mem_bytes"][c]
            if not got == want:
                print("FAIL: %s rank %d %s: allocated %r bytes, planned %r" % (case, p["rank"], c, got, want))
                bad += 1
        for g in groups:
            got, want = r["last_step_bytes"][g], p["step_bytes"][g]
            if not got == want:
                print("FAIL: %s rank %d: %s bytes per step %r, planned %r" % (case, p["rank"], g, got, want))
                bad += 1
        if "muon_bytes" in p:
            for g, want in p["muon_bytes"].items():
                got = r["last_step_muon_bytes"][g]
                if not got == want:
                    print("FAIL: %s rank %d: muon %s bytes per step %r, planned %r" % (case, p["rank"], g, got, want))
                    bad += 1
            if not r["optimizer_flops"] == p["optimizer_flops"]:
                print("FAIL: %s rank %d: optimizer FLOPs %r, planned %r" % (case, p["rank"], r["optimizer_flops"], p["optimizer_flops"]))
                bad += 1
    p0 = plan["ranks"][0]
    print("%-9s rank 0: " % case + " ".join("%s %d" % (c, p0["mem_bytes"][c]) for c in CATS) +
          " | per step " + " ".join("%s %d" % (g, p0["step_bytes"][g]) for g in groups))
    return bad, p0


if __name__ == "__main__":
    work, groups = sys.argv[1], sys.argv[2].split(",")
    bad = sum(compare(work, c.split()[0], groups)[0] for c in sys.argv[3:])
    sys.exit(1 if bad else 0)
