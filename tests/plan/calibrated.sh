# Calibration on this machine, as behaviour (nothing here depends on how
# fast the machine is, or how busy): meshbench measures gemm (small at 128
# and 256 tokens, one thread), allreduce on 2 ranks, stream and attention; meshplan
# calibrate turns that into a profile which
#  1. holds what was measured: each matmul point is the mean of the
#     measured GFLOP/s of its size (sizes in order), the peak the fastest;
#     the block attention kernels' rate (meshbench attention at T = 64 and
#     128) on whole 64:256 tiles, as the cost model counts them, in fp32
#     (attn_gflops) and in bf16 (attn_gflops_bf16) each from its own rows;
#     the link's latency the smallest message's time and its bandwidth the
#     best bus bandwidth among the three largest sizes (across nodes = inside
#     on one node); the memory bandwidth the stream figure; the given devices
#     and memory;
#  2. loads back into meshplan, which prices layouts of small from it;
#  3. drives those prices: the same profile with every matmul, attention and
#     memory figure doubled halves each layout's predicted compute and optimizer
#     time and leaves its tp time; with the link twice as fast (bandwidth x2,
#     latency / 2) the tp and dp times halve and compute stays.
# How well the prices match measured step times is a benchmark, not a test:
# apps/scripts/bench-calibrate.sh.
source "$(dirname "$0")/../scripts/common.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for tok in 128 256; do
  "$MT_BIN/meshbench" gemm --model small --threads 1 --tokens $tok --reps 1 --json "$WORK/gemm.jsonl" > /dev/null
done
mt_mpirun 2 "$MT_BIN/meshbench" allreduce --min-bytes 1K --max-bytes 1M --json "$WORK/coll.jsonl" > /dev/null
"$MT_BIN/meshbench" stream --mib 8 --threads 1 --json "$WORK/stream.jsonl" > /dev/null
for prec in fp32 bf16; do
  "$MT_BIN/meshbench" attention --model small --seq 64,128 --tokens 256 --threads 1 --reps 1 \
    --kernels new --precision $prec --json "$WORK/attn.jsonl" > /dev/null
done
"$MT_BIN/meshplan" calibrate --gemm "$WORK/gemm.jsonl" --coll "$WORK/coll.jsonl" \
  --stream "$WORK/stream.jsonl" --attn "$WORK/attn.jsonl" --name here --devices-per-node 2 --mem-gib 8 --out "$WORK/here.ini" \
  || fail "calibrate"
cat "$WORK/here.ini"

# the profile against the measurements, and two edited copies of it
python3 - "$WORK" <<'PY'
import json, os, sys
w = sys.argv[1]
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import within
def lines(name, bench):
    return [r for r in map(json.loads, open(os.path.join(w, name))) if r.get("bench") == bench]
c, section = {"gemm": ""}, None  # the [cost] section; gemm may span lines (4 points each)
for line in open(os.path.join(w, "here.ini")):
    line = line.split("#")[0].strip()
    if line.startswith("["):
        section = line
    elif "=" in line and section == "[cost]":
        k, v = (x.strip() for x in line.split("=", 1))
        c[k] = c[k] + " " + v if k == "gemm" else v
bad = []
def want(what, got, expect, rtol):
    if not within(got, expect, rtol):
        bad.append("%s: profile %r, measured %r" % (what, got, expect))
# matmuls: mean GFLOP/s per size (printed %.4g:%.5g)
by = {}
for r in lines("gemm.jsonl", "gemm"):
    for s in r["shapes"]:
        by.setdefault(2.0 * s["m"] * s["n"] * s["k"], []).append(s["gflops"])
sizes = sorted(by)[:32]
points = [tuple(map(float, p.split(":"))) for p in c["gemm"].split()]
if len(points) != len(sizes):
    bad.append("%d matmul points for %d measured sizes" % (len(points), len(sizes)))
for (f, g), size in zip(points, sizes):
    want("matmul size", f, size, 1e-3)
    want("GFLOP/s at %.3g flops" % size, g, sum(by[size]) / len(by[size]), 1e-4)
want("peak_gflops", float(c["peak_gflops"]), max(sum(v) / len(v) for v in by.values()), 1e-5)
# the link (one node: inside and across alike)
rows = lines("coll.jsonl", "allreduce")
small = min(r["bytes"] for r in rows)
lat = min(r["time_us"] for r in rows if r["bytes"] == small)
top3 = sorted({r["bytes"] for r in rows})[-3:]
bw = max(r["busbw_gbs"] for r in rows if r["bytes"] >= top3[0])
for k in ("intra", "inter"):
    want(k + "_us", float(c[k + "_us"]), lat, 1e-5)
    want(k + "_gbs", float(c[k + "_gbs"]), bw, 1e-5)
want("elementwise_gbs", float(c["elementwise_gbs"]), max(r["gbs"] for r in lines("stream.jsonl", "stream")), 1e-5)
# attention: the block kernels' rate on the CPU backend's 64:256 tiles, the
# mean over the rows of 3.5 x (forward and its 2.5 x backward) the whole
# tiles' FLOPs (4 hs a query-key pair) over the time measured
def whole_tiles(T, hs, br=64, bc=256):
    f = 0.0
    for r0 in range(0, T, br):
        rows = min(br, T - r0)
        f += 4.0 * br * (-(-(r0 + rows) // bc)) * bc * hs
    return f
for prec, key in (("fp32", "attn_gflops"), ("bf16", "attn_gflops_bf16")):
    ar = [(r, a) for a in lines("attn.jsonl", "attention") if a.get("precision") == prec
          for r in a["rows"]]
    rates = [3.5 * r["B"] * a["n_head"] * whole_tiles(r["T"], a["n_embd"] // a["n_head"]) /
             r["blocks"]["time_s"] / 1e9 for r, a in ar]
    if len(ar) != 2 or c.get("attn_block") != "64:256" or key not in c:
        bad.append("attention in %s: %d rows measured, attn_block %r, %s %r" %
                   (prec, len(ar), c.get("attn_block"), key, c.get(key)))
    else:
        want(key, float(c[key]), sum(rates) / len(rates), 1e-5)
if int(c["devices_per_node"]) != 2 or not within(float(c["mem_gib"]), 8.0, 1e-9):
    bad.append("devices_per_node %s, mem_gib %s: want 2 and 8" % (c["devices_per_node"], c["mem_gib"]))
if bad:
    sys.exit("FAIL: the profile does not hold what was measured:\n  " + "\n  ".join(bad))
print("ok   the profile holds the %d matmul sizes, the link and stream figures measured" % len(sizes))
# edited copies: compute x2; the link x2 (bandwidth doubled, latency halved)
src = open(os.path.join(w, "here.ini")).read().splitlines()
def edited(name, change):  # change: key -> new value text from the old one
    with open(os.path.join(w, name), "w") as f:
        for line in src:
            k, eq, v = (x.strip() for x in line.partition("="))
            f.write("%s = %s\n" % (k, change[k](v)) if eq and k in change else line + "\n")
twice = lambda v: repr(2 * float(v))  # noqa: E731
half = lambda v: repr(float(v) / 2)  # noqa: E731
edited("compute2.ini", {"elementwise_gbs": twice, "attn_gflops": twice, "peak_gflops": twice,
                        "attn_gflops_bf16": twice,
                        "gemm": lambda v: " ".join("%s:%r" % (q.split(":")[0], 2 * float(q.split(":")[1]))
                                                   for q in v.split())})
edited("link2.ini", {"intra_gbs": twice, "inter_gbs": twice, "intra_us": half, "inter_us": half})
PY

# prices from each profile; then how they move
common=(--set model.preset=small --set model.seq_len=128 --set train.global_batch=8)
layouts=("dp_z1 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=4"
         "tp_sp --set parallel.tp=2 --set parallel.sp=true --set train.micro_batch=4"
         "pp_m2 --set parallel.pp=2 --set train.micro_batch=4")
for prof in here compute2 link2; do
  for l in "${layouts[@]}"; do
    read -r name args <<< "$l"
    # shellcheck disable=SC2086
    "$MT_BIN/meshplan" "${common[@]}" $args --hw "$WORK/$prof.ini" --only > "$WORK/$name.$prof.json" \
      2> "$WORK/$name.$prof.err" || { cat "$WORK/$name.$prof.err"; fail "meshplan does not price $name from $prof.ini"; }
  done
done
python3 - "$WORK" "${layouts[@]}" <<'PY'
import json, os, sys
w, names = sys.argv[1], [l.split()[0] for l in sys.argv[2:]]
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import finite, within
bad = []
for n in names:
    base, comp, link = (json.load(open("%s/%s.%s.json" % (w, n, p))) for p in ("here", "compute2", "link2"))
    if not (finite(base["step_s"]) and base["step_s"] > 0 and base["compute_s"] > 0):
        bad.append("%s: the price from the calibrated profile is %r" % (n, base["step_s"]))
    # printed figures carry about 6 digits: 1e-4 leaves room for the rounding
    for k in ("compute_s", "optim_s"):
        if not within(comp[k], base[k] / 2, 1e-4):
            bad.append("%s: %s %r with compute x2, %r before" % (n, k, comp[k], base[k]))
    for k in ("tp_s", "dp_exposed_s"):  # (calibrate writes overlap 0: dp is all exposed)
        if not within(comp[k], base[k], 1e-4) and not (comp[k] == base[k] == 0):
            bad.append("%s: %s moved with compute x2: %r, %r before" % (n, k, comp[k], base[k]))
        if not within(link[k], base[k] / 2, 1e-4) and not (link[k] == base[k] == 0):
            bad.append("%s: %s %r with the link x2, %r before" % (n, k, link[k], base[k]))
    if not within(link["compute_s"], base["compute_s"], 1e-9):
        bad.append("%s: compute moved with the link x2" % n)
    print("%-6s step %.4f s (compute %.4f, tp %.4f, dp %.4f); compute x2: %.4f; link x2: %.4f"
          % (n, base["step_s"], base["compute_s"], base["tp_s"], base["dp_exposed_s"], comp["step_s"],
             link["step_s"]))
tp = json.load(open("%s/tp_sp.here.json" % w))
if not tp["tp_s"] > 0:
    bad.append("the tp layout prices no tp collectives")
if bad:
    sys.exit("FAIL: the profile does not drive the prices:\n  " + "\n  ".join(bad))
print("ok   the calibrated profile prices 3 layouts, and its figures drive the prices")
PY
echo PASS
