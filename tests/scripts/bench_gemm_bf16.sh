# meshbench gemm-bf16 --peak: the instruction peaks of one core (FMA,
# vdpbf16ps, and AMX's tdpbf16ps where the CPU has it and the OS grants the
# tiles), each path's limit (peak x threads) and every shape's rate as a
# fraction of its path's limit, in the table and the JSON line; figures
# consistent with each other (no check of their size: that is timing); an
# unknown path refused in one line, exit 2.
source "$(dirname "$0")/common.sh"
B="$MT_BIN/meshbench"
OMP_NUM_THREADS=1 "$B" gemm-bf16 --model tiny --tokens 64 --reps 1 --peak --clock cpu \
  --json "$WORK/g.jsonl" > "$WORK/g.txt" 2>&1 || { cat "$WORK/g.txt"; fail "meshbench gemm-bf16 --peak failed"; }
cat "$WORK/g.txt"
amx=0
grep -qw amx_bf16 /proc/cpuinfo && grep -qw amx_tile /proc/cpuinfo && amx=1
python3 - "$WORK/g.jsonl" "$WORK/g.txt" "$amx" <<'PY' || fail "the peaks and limits of meshbench gemm-bf16 do not add up"
import json, math, re, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
txt, amx_flags = open(sys.argv[2]).read(), sys.argv[3] == "1"
if "no AVX-512 on this CPU" in txt:
    assert not any(k.startswith("limit_gflops_") for k in r), r
    print("no AVX-512: no limits, as expected"); sys.exit(0)
level = r["cpu_bf16_level"]
# AMX's peak is printed exactly where the process got AMX (level 2), which
# needs the CPU flags (the OS may still refuse the tiles: level 1 then)
assert ("AMX tdpbf16ps" in txt) == (level == 2), (level, txt)
assert level < 2 or amx_flags, "level 2 without the CPU's amx flags"
lim = {p: r["limit_gflops_" + p] for p in ("fp32", "sgemm", "onednn") if "limit_gflops_" + p in r}
assert lim["fp32"] > 0 and lim["sgemm"] == lim["fp32"], lim
want = "AMX" if level == 2 else "vdpbf16ps" if level == 1 else "FMA"
m = re.search(r"oneDNN ([0-9.]+) GFLOP/s \((\w+)\)", txt)
if "onednn" in lim:
    assert m and m.group(2) == want, (want, m and m.group(0))
    assert math.isclose(float(m.group(1)), lim["onednn"], rel_tol=1e-3, abs_tol=0.06), (m.group(1), lim)
    if level == 1:  # vdpbf16ps does twice the FMA's flops an instruction
        assert lim["onednn"] > lim["fp32"], lim
n = 0
for s in r["shapes"]:
    for p, l in lim.items():
        if "gflops_" + p not in s: continue
        f = s["of_limit_" + p]
        assert math.isclose(f, s["gflops_" + p] / l, rel_tol=1e-12) and f > 0, (s, p, l)
        n += 1
rows = [l for l in txt.splitlines() if l.startswith("  ") and l.count("|") == 4]
assert len(rows) == len(r["shapes"]) and n >= len(rows), (len(rows), n)
for row, s in zip(rows, r["shapes"]):
    got = [float(x) for x in row.split("|")[4].split()]
    exp = [s.get("of_limit_" + p, float("nan")) for p in ("fp32", "sgemm", "onednn")]
    assert all((math.isnan(e) and math.isnan(g)) or abs(g - e) <= 0.006 for g, e in zip(got, exp)), (row, exp)
print("limits %s; %d shape x path fractions consistent" % (lim, n))
PY
rc=0; out=$("$B" gemm-bf16 --paths bogus 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "an unknown path: exit $rc, not 2"
[ "$(wc -l <<< "$out")" = 1 ] && grep -q "unknown path 'bogus'" <<< "$out" || fail "not one line naming the path: $out"
# --cold: said, and in the JSON line
OMP_NUM_THREADS=1 "$B" gemm-bf16 --model tiny --tokens 64 --reps 1 --cold --json "$WORK/c.jsonl" \
  > "$WORK/c.txt" 2>&1 || { cat "$WORK/c.txt"; fail "meshbench gemm-bf16 --cold failed"; }
grep -q "^# cold: the caches are flushed" "$WORK/c.txt" && grep -q '"cold":true' "$WORK/c.jsonl" ||
  fail "--cold not said in the table and the JSON line"
# attention's block kernels on bf16 operands against the fp32 reference:
# agree to bf16's rounding (meshbench counts a row off by more as wrong, exit 3)
OMP_NUM_THREADS=1 "$B" attention --model tiny --seq 64,128 --tokens 256 --reps 1 --precision bf16 \
  --json "$WORK/a.jsonl" > "$WORK/a.txt" 2>&1 || { cat "$WORK/a.txt"; fail "bf16 attention: wrong or failed"; }
grep -q "block kernels in bf16" "$WORK/a.txt" && grep -q "; 0 wrong" "$WORK/a.txt" &&
  grep -q '"precision":"bf16"' "$WORK/a.jsonl" || { cat "$WORK/a.txt"; fail "bf16 attention not said"; }
rc=0; out=$("$B" attention --precision fp16 2>&1) || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <<< "$out")" = 1 ] && grep -q "fp16" <<< "$out" ||
  fail "--precision fp16: exit $rc, '$out'"
echo PASS
