# auto_hw.sh CASE
#   virtual: parallel.layout = auto on the virtual device plans on the
#     emulated profile (train.virtual_hw = h200), not on metrics.hw
#     (cpu-generic): the layout and predicted step it prints are those of
#     plan.hw = h200, and differ from cpu-generic's prices
#   node: the search keeps ep (and tp) inside a node of the profile (4
#     devices) unless plan.across_nodes = true asks for groups across nodes
MT_SUFFIX=$1
source "$(dirname "$0")/../scripts/common.sh"
planned() {  # the planner's line of meshtrain --check, from "on N ranks" on
  "$MT_BIN/meshtrain" --check --ranks 8 --set model.preset=gpt2-124m --set train.global_batch=64 \
    --set parallel.layout=auto "$@" | sed -n 's/^meshtrain: parallel\.layout = auto \(on .*\)$/\1/p'
}
case $1 in
  virtual)
    virt=$(planned --set train.device=virtual --set train.virtual_hw=h200 --set ckpt.mode=none \
      --set metrics.hw=cpu-generic)
    h200=$(planned --set plan.hw=h200)
    cpu=$(planned --set plan.hw=cpu-generic)
    echo "virtual: $virt"; echo "h200:    $h200"; echo "cpu:     $cpu"
    [ -n "$virt" ] && [ -n "$h200" ] && [ -n "$cpu" ] || fail "a planner line is missing"
    [ "$virt" = "$h200" ] || fail "the virtual device did not plan on its emulated profile h200"
    [ "${virt#*predicted}" != "${cpu#*predicted}" ] || fail "h200 and cpu-generic price alike: the case tells nothing"
    ;;
  node)
    MOE=(--set model.preset=tiny --set model.moe_experts=16 --set model.moe_topk=2
         --set train.global_batch=32 --hw "$MT_SRC/tests/plan/cost-test.ini" --nodes 4)
    "$MT_BIN/meshplan" "${MOE[@]}" --json "$WORK/in.json" > /dev/null
    "$MT_BIN/meshplan" "${MOE[@]}" --set plan.across_nodes=true --json "$WORK/across.json" > /dev/null
    python3 - "$WORK/in.json" "$WORK/across.json" <<'PY'
import json, sys
inside, across = (json.load(open(p)) for p in sys.argv[1:])
node = 4  # cost-test.ini's devices_per_node
assert inside and across, "no layouts"
big = [(r["tp"], r["ep"]) for r in inside if r["tp"] > node or r["ep"] > node]
assert not big, "groups across nodes without plan.across_nodes: %s" % big[:5]
assert any(r["ep"] > node for r in across), "plan.across_nodes = true offers no ep across nodes"
print("ok   %d layouts with tp, ep <= %d; %d with ep across nodes when asked"
      % (len(inside), node, sum(r["ep"] > node for r in across)))
PY
    ;;
  *) fail "unknown case $1" ;;
esac
echo PASS
