# The virtual device (train.device = virtual, issue: time-warp emulation):
# real multi-rank runs whose ops compute nothing and move a virtual clock,
# and whose messages carry timestamps over MPI. For RANKS = 16: a tp x pp x
# dp layout with interleaving and ZeRO-1 (run twice), tp x cp (ring) x pp x
# dp with sequence parallelism, MoE with ep over a tp x pp x dp mesh, and
# the first layout and the MoE one in bf16 (train.precision, the first
# with grad_reduce_dtype = bf16);
# for RANKS = 64 an interleaved tp 2 x pp 4 x dp 8. Each run's memory per
# category and bytes per group (summary.json) equal `meshtrain --plan`
# exactly (plan_vs_run.py); the causality checks ran (a receive never
# completes before its send was issued, a collective never before its
# latest arrival) and none failed; the run twice gives the same virtual
# times (every time field of every metrics line); the metrics carry a
# positive virtual step time, tokens/s and MFU.
MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 400000)
common=(--set model.preset=custom --set model.n_layer=8 --set model.n_embd=64 --set model.n_head=4
        --set model.seq_len=64 --set data.train="$corpus" --set train.steps=3 --set train.eval_every=0
        --set ckpt.mode=none --set train.micro_batch=1 --set train.device=virtual
        --set train.virtual_hw=h200)
if [ "$1" = 16 ]; then
  cases=("dtp 16 --set train.global_batch=32 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
         "dtp_again 16 --set train.global_batch=32 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
         "cpring 16 --set train.global_batch=32 --set parallel.tp=2 --set parallel.cp=2 --set parallel.pp=2 --set parallel.dp=2 --set parallel.sp=true --set parallel.zero=1"
         "moe_ep 16 --set train.global_batch=32 --set model.moe_experts=8 --set model.moe_topk=2 --set parallel.ep=4 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1"
         "moe_ep_bf16 16 --set train.global_batch=32 --set model.moe_experts=8 --set model.moe_topk=2 --set parallel.ep=4 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1 --set train.precision=bf16"
         "dtp_bf16 16 --set train.global_batch=32 --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=4 --set parallel.zero=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.precision=bf16 --set parallel.grad_reduce_dtype=bf16")
else
  cases=("r64 64 --set train.global_batch=64 --set parallel.tp=2 --set parallel.pp=4 --set parallel.dp=8 --set parallel.zero=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2")
fi
for c in "${cases[@]}"; do
  read -r name np args <<< "$c"
  # shellcheck disable=SC2086
  "$MT_BIN/meshtrain" "${common[@]}" $args --plan-json "$WORK/$name.plan.json" > /dev/null ||
    fail "plan $name"
  # shellcheck disable=SC2086
  mt_mpirun "$np" "$MT_BIN/meshtrain" "${common[@]}" $args --set output.dir="$WORK/$name" \
    > "$WORK/$name.log" 2>&1 || { tail -30 "$WORK/$name.log"; fail "virtual run $name failed"; }
done
python3 "$MT_SRC/tests/scripts/plan_vs_run.py" "$WORK" dp,tp,pp,cp,ep,etp,edp "${cases[@]}" ||
  fail "the virtual runs' memory or bytes differ from the plan"
python3 - "$WORK" "${cases[@]}" <<'PY'
import json, sys
work, names = sys.argv[1], [c.split()[0] for c in sys.argv[2:]]
bad = 0
def lines(n):
    return [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (work, n))]
for n in names:
    s = json.load(open("%s/%s/summary.json" % (work, n)))
    v = s.get("virtual", {})
    if s["device"]["kind"] != "virtual" or not v.get("causality_checks", 0) > 0:
        print("FAIL: %s: no causality checks ran (%r)" % (n, v)); bad += 1
    if not v.get("causality_violations", 1) == 0:
        print("FAIL: %s: %r causality violations" % (n, v.get("causality_violations"))); bad += 1
    for r in lines(n):
        if not (r["step_s"] > 0 and r["tokens_per_s"] > 0 and r["mfu"] > 0):
            print("FAIL: %s step %d: step_s %r tokens/s %r mfu %r" % (n, r["step"], r["step_s"],
                  r["tokens_per_s"], r["mfu"])); bad += 1
    r = lines(n)[-1]
    print("%-9s virtual step %.6f s, %.0f tokens/s, MFU %.4f, %d causality checks; emulated in "
          "%.2f s of wall time" % (n, r["step_s"], r["tokens_per_s"], r["mfu"],
                                   v["causality_checks"], v["loop_wall_s"]))
if "dtp" in names:  # the same run twice: the same virtual times, every field
    keep = ("step_s", "tokens_per_s", "mfu", "time_s", "pp")
    a = [{k: r[k] for k in keep} for r in lines("dtp")]
    b = [{k: r[k] for k in keep} for r in lines("dtp_again")]
    if a != b:
        print("FAIL: the same virtual run twice gave different times:\n%s\n%s" % (a, b)); bad += 1
if "dtp_bf16" in names:
    # bf16 on a bf16 profile (h200, act_bytes 2): the profile already priced
    # the fp32 run's activation messages and gathers in bf16, so the run that
    # sends them in bf16 costs the same but for its casts and the gradient
    # reduction, now bf16 too; activations half of fp32's
    f, h = lines("dtp")[-1], lines("dtp_bf16")[-1]
    ratio = h["step_s"] / f["step_s"]
    act = h["mem_peak_bytes"]["activations"] / f["mem_peak_bytes"]["activations"]
    print("bf16/fp32 on h200: virtual step %.4f, activations %.3f, dp bytes %d / %d"
          % (ratio, act, h["dp_bytes"], f["dp_bytes"]))
    if not (0.9 <= ratio <= 1.02):
        print("FAIL: bf16 virtual step %.4f of fp32's, expected 0.9-1.02" % ratio); bad += 1
    if not (0.45 <= act <= 0.55):
        print("FAIL: bf16 activations %.3f of fp32's, expected about 0.5" % act); bad += 1
    if not h["dp_bytes"] < 0.8 * f["dp_bytes"]:
        print("FAIL: the bf16 reduction sent %d dp bytes against fp32's %d"
              % (h["dp_bytes"], f["dp_bytes"])); bad += 1
sys.exit(1 if bad else 0)
PY
echo PASS
