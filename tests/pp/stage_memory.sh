# stage_memory.sh
# A pipeline stage holds, reduces over dp and updates only its own tensors:
# tiny with 4 layers on dp = 2 (ZeRO-1) and pp = 1, 2, 4. Each stage's
# parameter bytes (summary.json pp_stages.params_bytes_per_rank) are
# exactly its tensors' from the model's shapes (blocks by the stage split,
# wte and wpe on the first stage, the final LN on the last, the tied LM head
# a copy of wte on the last), the stages together hold the model plus that
# one copy, and the dp bytes per step are the stage's buffer reduce-scattered
# and all-gathered over dp = 2 (as many bytes as the buffer holds). Prints
# the table.
MT_NAME=pp_stage_memory
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=2
        --set train.global_batch=8 --set train.micro_batch=1 --set data.train="$corpus"
        --set train.eval_every=0 --set ckpt.mode=none --set parallel.dp=2 --set parallel.zero=1)
for pp in 1 2 4; do
  mt_mpirun $((2 * pp)) "$MT_BIN/meshtrain" "${common[@]}" --set parallel.pp=$pp \
    --set output.dir="$WORK/pp$pp" > "$WORK/pp$pp.log" 2>&1 || { cat "$WORK/pp$pp.log"; fail "run pp=$pp failed"; }
done
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
L, C, T, V = 4, 32, 32, 256                   # tiny, 4 layers (vocab 256: no padding)
wte, wpe, lnf = V * C, T * C, 2 * C
block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
def expect(pp):  # floats each stage holds
    per = L // pp
    return [per * block + (wte + wpe if s == 0 else 0) + (lnf + wte if s == pp - 1 else 0)
            - (wte if pp == 1 else 0) for s in range(pp)]
def dp_bytes(params_bytes, n=2):  # reduce-scatter + all-gather of the buffer over dp = n
    return 2 * (n - 1) / n * params_bytes
rows = []
for pp in (1, 2, 4):
    s = json.load(open("%s/pp%d/summary.json" % (work, pp)))
    want = [4 * x for x in expect(pp)]
    if pp == 1:
        got_p, got_d = [s["params_bytes_per_rank"]], [s["dp_bytes_per_step"]]
    else:
        got_p = s["pp_stages"]["params_bytes_per_rank"]
        got_d = s["pp_stages"]["dp_bytes_per_step"]
        assert s["params_bytes_per_rank"] == got_p[0], "rank 0 is on stage 0"
        assert s["dp_bytes_per_step"] == got_d[0]
    if got_p != want:
        sys.exit("FAIL: pp=%d params bytes per stage %r, expected %r" % (pp, got_p, want))
    if got_d != [dp_bytes(x) for x in want]:
        sys.exit("FAIL: pp=%d dp bytes per step per stage %r, expected %r"
                 % (pp, got_d, [dp_bytes(x) for x in want]))
    if sum(got_p) != 4 * (L * block + wte + wpe + lnf) + (4 * wte if pp > 1 else 0):
        sys.exit("FAIL: pp=%d stages hold %d bytes together" % (pp, sum(got_p)))
    # what rank 0 (stage 0) measured on the dp group: the plan plus the scalar sums
    m = [json.loads(l) for l in open("%s/pp%d/metrics.jsonl" % (work, pp))][-1]
    if not got_d[0] <= m["dp_bytes"] <= got_d[0] + 256:
        sys.exit("FAIL: pp=%d measured dp bytes %r, planned %r" % (pp, m["dp_bytes"], got_d[0]))
    rows.append((pp, got_p, got_d))
base = rows[0][1][0]
for pp, p, d in rows:
    print("pp=%d  params bytes per rank %-26s (max %.3f of pp=1)  dp bytes per step %s"
          % (pp, p, max(p) / base, [int(x) for x in d]))
assert max(rows[1][1]) < 0.6 * base and max(rows[2][1]) < 0.4 * base, "pp does not divide params"
print("ok   each stage holds, reduces and updates only its own tensors")
PY
