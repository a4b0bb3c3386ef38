# The virtual device prices messages in its profile's dtypes, as meshplan
# does: the same pp 2 x dp 2 run (ZeRO-0, 4 ranks in one node) on two
# copies of a profile that differ only in act_bytes (2: a bf16 device; 4)
# counts the same bytes per group (the code's fp32 messages: the plan's
# figures), while in virtual time each pipeline send takes half as long to
# cross the link on the bf16 profile (bytes at 2 bytes an element) and each
# gradient all-reduce over dp_cp takes as long on both (fp32 reductions).
# The link is slow (1 GB/s) so that bytes, not latency, set the times;
# overlap = 1, so that a reduction beside compute keeps its whole rate and
# its span is its price.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
for ab in 2 4; do
  cat > "$WORK/ab$ab.ini" <<EOF
[hw]
name = ab$ab
[cost]
devices_per_node = 8
mem_gib = 80
peak_gflops = 100000
gemm = 1e8:50000 1e12:100000
elementwise_gbs = 1000
intra_gbs = 1
intra_us = 5
inter_gbs = 1
inter_us = 5
overlap = 1
act_bytes = $ab
EOF
  mt_mpirun 4 "$MT_BIN/meshtrain" --set model.preset=custom --set model.n_layer=4 \
    --set model.n_embd=256 --set model.n_head=4 --set model.seq_len=256 --set data.train="$corpus" \
    --set train.global_batch=8 --set train.micro_batch=2 --set parallel.pp=2 --set parallel.dp=2 \
    --set parallel.zero=0 --set train.steps=2 --set train.eval_every=0 --set ckpt.mode=none \
    --set train.device=virtual --set train.virtual_hw="$WORK/ab$ab.ini" --set metrics.trace=true \
    --set output.dir="$WORK/run$ab" > "$WORK/run$ab.log" 2>&1 || { cat "$WORK/run$ab.log"; fail "virtual run, act_bytes $ab"; }
done
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def spans(ab, cat, name=None):
    ev = json.load(open("%s/run%s/trace/rank0.json" % (w, ab)))["traceEvents"]
    return [e["dur"] for e in ev if e.get("ph") == "X" and e.get("cat") == cat and
            (name is None or e["name"] == name)]
s2, s4 = json.load(open(w + "/run2/summary.json")), json.load(open(w + "/run4/summary.json"))
keys = ("dp_bytes_per_step", "pp_bytes_per_step", "tp_bytes_per_step")
b2, b4 = {k: s2[k] for k in keys}, {k: s4[k] for k in keys}
assert b2 == b4 and b2["pp_bytes_per_step"] > 0 and b2["dp_bytes_per_step"] > 0, (b2, b4)
lat = 5.0  # us
sends2, sends4 = spans(2, "send"), spans(4, "send")
assert len(sends2) == len(sends4) > 0, (len(sends2), len(sends4))
# each send crosses the link in half the time at act_bytes 2; the largest,
# a micro-batch's hidden state (B x T x C = 2 x 256 x 256 elements), at
# act_bytes each over 1 GB/s, plus the latency
elems = 2 * 256 * 256
for d2, d4 in zip(sends2, sends4):
    assert abs((d4 - lat) - 2 * (d2 - lat)) <= 1e-2, ("send", d2, d4)
assert abs(max(sends2) - (lat + elems * 2 / 1e3)) <= 1e-2, ("bf16 send", max(sends2))
assert abs(max(sends4) - (lat + elems * 4 / 1e3)) <= 1e-2, ("fp32 send", max(sends4))
red2, red4 = spans(2, "collective", "dp_cp"), spans(4, "collective", "dp_cp")
big2 = [d for d in red2 if d > 100]
big4 = [d for d in red4 if d > 100]
assert len(big2) == len(big4) > 0, (len(big2), len(big4))
for d2, d4 in zip(big2, big4):
    assert abs(d2 - d4) <= 1e-6 * d4 + 1e-3, ("gradient all-reduce", d2, d4)
print("ok   bytes per step equal (pp %d, dp %d); %d sends, the largest of %d elements: %.3f us "
      "(act_bytes 2) and %.3f us (4); %d gradient reductions of %.1f us on both" % (
          b2["pp_bytes_per_step"], b2["dp_bytes_per_step"], len(sends2), elems, max(sends2),
          max(sends4), len(big2), big2[0]))
PY
echo PASS
