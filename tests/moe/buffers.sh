# MoE buffers sized at parallel.moe_buffer_factor x a balanced routing's
# rows grow when a step's routing brings more (issue 40). A router skewed
# to expert 0 (aux-loss-free balancing starting from a bias of 1 on it)
# sends the ep rank holding it more than a balanced share. With factor 1
# that rank grows its buffers (a line from it, "[rank R] MoE buffers
# grown"); with factor 0 (sized for the worst routing) none does. On a
# dp x ep, a tp x etp x ep and a pipelined (ZB-H1's split backward,
# recompute, bf16) layout the losses of the two are the same bits. The
# allocator's counters say what is held: the factor-0 runs' activation
# peaks equal their plans' (meshtrain --plan-json), and the factor-1 runs'
# equal theirs on every rank that did not grow and exceed them on every
# rank that did.
MT_NAME=moe_buffers
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=6 --set train.eval_every=0 --set train.moe_balance=bias
      --set train.moe_bias_init=1.0)
cases=("dpep 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2"
       "tpetp 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.etp=2 --set parallel.ep=2 \
--set train.micro_batch=1"
       "ppzb 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=1 \
--set parallel.schedule=zb-h1 --set train.recompute=true --set train.precision=bf16")
for c in "${cases[@]}"; do
  read -r name np settings <<< "$c"
  for f in 0 1; do
    # shellcheck disable=SC2086
    mt_plan_and_train "${name}_f$f $np $settings --set parallel.moe_buffer_factor=$f" "${MOE[@]}"
  done
  python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/${name}_f0" "$WORK/${name}_f1" --bitwise \
    --steps 6 || fail "$name: the losses differ between factor 0 and factor 1"
done
python3 - "$WORK" "${cases[@]}" <<'PY' || fail "buffers or counters"
import json, re, sys
work, bad = sys.argv[1], 0
for case in (c.split()[0] for c in sys.argv[2:]):
    for f in (0, 1):
        run = "%s_f%d" % (case, f)
        log = open("%s/%s.log" % (work, run)).read()
        grew = {int(r) for r in re.findall(r"\[rank (\d+)\] MoE buffers grown to \d+ rec", log)}
        if (f == 0) != (not grew):
            print("FAIL: %s: ranks %s grew their buffers" % (run, sorted(grew) or "none"))
            bad += 1
        plan = {r["rank"]: r["mem_bytes"]["activations"]
                for r in json.load(open("%s/%s.plan.json" % (work, run)))["ranks"]}
        for r in json.load(open("%s/%s/summary.json" % (work, run)))["ranks"]:
            got, want = r["mem_peak_bytes"]["activations"], plan[r["rank"]]
            if not (got > want if r["rank"] in grew else got == want):
                print("FAIL: %s rank %d%s: activations peak %r bytes, planned %r"
                      % (run, r["rank"], " (grew)" if r["rank"] in grew else "", got, want))
                bad += 1
        if f == 1:
            print("ok   %s: ranks %s grew; the losses equal factor 0's" % (case, sorted(grew)))
sys.exit(1 if bad else 0)
PY
echo PASS
