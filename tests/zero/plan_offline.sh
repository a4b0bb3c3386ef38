# meshtrain --plan needs no MPI launch and prints a plan for any mesh, larger
# than this machine: gpt2-124m on dp = 64 at zero 0-3. The parameter,
# gradient and optimizer bytes per rank follow the ZeRO paper's accounting
# at fp32 (parameters P = 4 bytes x its share, gradients 4, AdamW 8: zero 0
# holds 16 bytes per parameter, zero 1 4+4+8/dp, zero 2 4+(4+8)/dp plus its
# bucket buffers, zero 3 16/dp plus its gathered layers) within the padding
# of the dp split (a few elements per bucket).
source "$(dirname "$0")/../scripts/common.sh"
for z in 0 1 2 3; do
  "$MT_BIN/meshtrain" --set model.preset=gpt2-124m --set parallel.dp=64 --set parallel.zero=$z \
    --set train.global_batch=512 --set train.micro_batch=8 --plan-json "$WORK/z$z.json" \
    > "$WORK/z$z.txt" || fail "plan zero=$z"
  cat "$WORK/z$z.txt"
done
# ZeRO-3 with pipeline stages: each stage's parameters sharded over its dp
# ranks (a stage holds about half of them, the dp share 1/64 of that)
"$MT_BIN/meshtrain" --set model.preset=gpt2-124m --set parallel.dp=64 --set parallel.zero=3 --set parallel.pp=2 \
  --set train.global_batch=512 --set train.micro_batch=4 --plan-json "$WORK/pp2z3.json" \
  > "$WORK/pp2z3.txt" || fail "plan zero 3 with pp = 2"
python3 - "$WORK/pp2z3.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert len(p["ranks"]) == 128, "128 ranks planned"
N = 124475904
for r in p["ranks"]:
    got = r["mem_bytes"]["params"]
    if not (0 < got < 4 * N / 64):  # a stage's share of the shard: below the whole model's
        sys.exit("FAIL: pp = 2, zero 3: rank %d holds %d parameter bytes" % (r["rank"], got))
print("pp = 2, zero 3: parameter bytes per rank %d..%d" % (min(r["mem_bytes"]["params"] for r in p["ranks"]),
                                                          max(r["mem_bytes"]["params"] for r in p["ranks"])))
PY
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
dp = 64
N = 124475904  # gpt2-124m parameters as stored (vocabulary padded to 50304 rows)
for z in range(4):
    p = json.load(open("%s/z%d.json" % (work, z)))
    assert len(p["ranks"]) == dp, "64 ranks planned"
    m = max(p["ranks"], key=lambda r: r["mem_bytes"]["optimizer"])["mem_bytes"]
    want = {0: (4 * N, 4 * N, 8 * N), 1: (4 * N, 4 * N + 4 * N / dp, 8 * N / dp),
            2: (4 * N, 4 * N / dp, 8 * N / dp), 3: (4 * N / dp, 4 * N / dp, 8 * N / dp)}[z]
    slack = 64 * 4 * 200  # at most one element per bucket per rank of padding, 200 buckets
    got = (m["params"], m["grads"], m["optimizer"])
    for what, g, w in zip(("params", "grads", "optimizer"), got, want):
        extra = g - w
        # zero 2/3 gradients also hold bucket buffers: allowed above the shard, but below 0.5 N
        ok = 0 <= extra <= slack or (what == "grads" and z >= 2 and 0 <= extra < 2 * N)
        if not ok:
            sys.exit("FAIL: zero %d %s %d bytes, ZeRO accounting %d" % (z, what, g, w))
    print("zero %d: params %.1f MB grads %.1f MB optimizer %.1f MB per rank (16 bytes x %d params "
          "= %.1f MB at zero 0), dp bytes per step %.1f MB"
          % (z, got[0] / 1e6, got[1] / 1e6, got[2] / 1e6, N, 16 * N / 1e6,
             p["ranks"][0]["step_bytes"]["dp"] / 1e6))
PY
echo PASS
