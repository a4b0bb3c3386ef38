# The kernels' results do not depend on the order in which the emulator
# resumes the runnable threads of a block (MT_EMU_ORDER forward, reverse,
# random): every byte gpu_ops, gpu_moe_ops, gpu_edges and gpu_ops_bf16 copy
# back from the GPU (started at fp32), digested by the emulator
# (MT_EMU_STATS: d2h_digest), is the same in each order. A result that
# changes with the order is a race between barriers
# (tests/gpu/emu/selftest.sh shows one being caught). gpu_ops, ten times the
# others' work, runs forward and reverse (the two extremes: a reader that
# overtakes its writer in one is behind it in the other); the others all
# three. Prints the launches, blocks and threads each program ran.
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
for prog in gpu_edges gpu_moe_ops gpu_ops_bf16 gpu_ops; do
  orders="forward reverse random"
  [ "$prog" != gpu_ops ] || orders="forward reverse"
  for order in $orders; do
    rm -f "$WORK/$prog.$order.jsonl"
    MT_EMU_ORDER=$order MT_EMU_SEED=7 MT_EMU_STATS="$WORK/$prog.$order.jsonl" \
      mt_mpirun 1 "$MT_TESTBIN/$prog" fp32 > "$WORK/$prog.$order.log" 2>&1 ||
      { tail -30 "$WORK/$prog.$order.log"; fail "$prog fp32 ($order order)"; }
  done
  python3 - "$WORK" "$prog" "$orders" <<'PY' || fail "$prog: the resume order changed the results"
import json, sys
work, prog = sys.argv[1], sys.argv[2]
st = {o: json.loads(open("%s/%s.%s.jsonl" % (work, prog, o)).read().strip().splitlines()[-1])
      for o in sys.argv[3].split()}
d = {o: s["d2h_digest"] for o, s in st.items()}
f = st["forward"]
print("%-12s %5d launches %8d blocks %10d threads, %d bytes back; digests %s" %
      (prog, f["launches"], f["blocks"], f["threads"], f["d2h_bytes"],
       " ".join("%s %s" % kv for kv in d.items())))
if not (f["d2h_bytes"] > 0 and len(set(d.values())) == 1):
    sys.exit("FAIL: %s: digests differ between orders: %s" % (prog, d))
PY
done
echo PASS
