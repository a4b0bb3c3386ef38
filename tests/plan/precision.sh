# train.precision applied once, in every attention mode: meshplan --only on
# an fp32 profile prices the same layout under train.precision = fp32 and
# bf16, with block and with materialized attention (and bf16 on a bf16
# profile, act_bytes = 2, where materialized attention once priced a
# quarter of the bf16 bytes). Its memory is what
# meshtrain --plan counts for that precision (the run's own counters, held
# equal by zero.plan_*), category by category; against fp32, bf16 halves
# the weights' copy (gathered ZeRO-3 buffers; the copy beside the fp32
# master) exactly, the tp bytes to 0.5-0.52 (scalar sums stay fp32),
# the pp bytes to 0.5-0.8 (the tied embeddings' sum stays fp32), the
# activations to 0.5-0.6 and the comm buffers to 0.5-0.8 of fp32's
# (statistics, log-sum-exp and losses stay fp32), never to a quarter (materialized attention once halved them
# twice, and bf16 changed nothing with block attention); the fp32 master,
# the moments and the fp32 gradients stay as they are; with
# train.grad_dtype = bf16 (reduced in bf16) the bf16 gradients and their
# fp32 accumulation slots are priced as the run holds them; materialized
# attention adds the T x T scores the run's block attention never keeps,
# per layer of the activation sets held. tiny on dp 2 (ZeRO-1, ZeRO-3),
# tp 2 and pp 2.
source "$(dirname "$0")/../scripts/common.sh"
prof="$WORK/big.ini"
sed 's/^mem_gib = .*/mem_gib = 64/' "$MT_SRC/tests/plan/cost-test.ini" > "$prof"
# a bf16 profile (act_bytes = 2: an fp32 configuration is priced in mixed bf16)
sed 's/^mem_gib = .*/mem_gib = 64\nact_bytes = 2/' "$MT_SRC/tests/plan/cost-test.ini" > "$WORK/big16.ini"
common=(--set model.preset=tiny --set train.global_batch=8 --set train.micro_batch=2
        --set plan.headroom=0)
g16=(--set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16)
for att in block materialized; do
  for c in "z1 --set parallel.dp=2 --set parallel.zero=1" "z3 --set parallel.dp=2 --set parallel.zero=3" \
           "tp2 --set parallel.tp=2" "pp2 --set parallel.pp=2"; do
    read -r name args <<< "$c"
    for prec in fp32 bf16; do
      # shellcheck disable=SC2086
      "$MT_BIN/meshplan" "${common[@]}" $args --set train.precision=$prec --hw "$prof" \
        --attention $att --only > "$WORK/$att.$name.$prec.json" || fail "meshplan $att $name $prec"
      [ $att = block ] || continue
      # shellcheck disable=SC2086
      "$MT_BIN/meshtrain" "${common[@]}" $args --set train.precision=$prec \
        --plan-json "$WORK/$name.$prec.plan.json" > /dev/null || fail "plan $name $prec"
    done
    # shellcheck disable=SC2086
    "$MT_BIN/meshplan" "${common[@]}" $args --set train.precision=bf16 --hw "$WORK/big16.ini" \
      --attention $att --only > "$WORK/$att.$name.b16.json" || fail "meshplan $att $name bf16 profile"
    # shellcheck disable=SC2086
    "$MT_BIN/meshplan" "${common[@]}" $args --set train.precision=bf16 "${g16[@]}" --hw "$prof" \
      --attention $att --only > "$WORK/$att.$name.g16.json" || fail "meshplan $att $name g16"
    # shellcheck disable=SC2086
    [ $att = materialized ] || "$MT_BIN/meshtrain" "${common[@]}" $args --set train.precision=bf16 \
      "${g16[@]}" --plan-json "$WORK/$name.g16.plan.json" > /dev/null || fail "plan $name g16"
  done
done
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
# materialized attention keeps each layer's T x T scores (softmax output,
# dropout mask and output: 2 x acts + 1 bytes an element) for every layer of
# the activation sets a stage holds at once, which block attention's counts
# (the run's) do not hold: tiny is 2 layers, 4 heads, T = 32, micro-batch 2;
# one set at pp 1, two on pp2's first stage (1F1B over 4 micro-batches)
def scores(name, prec, stage):
    acts = 4 if prec == "fp32" else 2
    sets, layers = ((2, 1) if stage == 0 else (1, 1)) if name == "pp2" else (1, 2)
    heads = 2 if name == "tp2" else 4
    return sets * layers * 2 * heads * 32 * 32 * (2 * acts + 1)
for att in ("block", "materialized"):
    for name in ("z1", "z3", "tp2", "pp2"):
        f, b, g, b16 = (json.load(open("%s/%s.%s.%s.json" % (work, att, name, p)))
                        for p in ("fp32", "bf16", "g16", "b16"))
        fm, bm, gm = f["mem"], b["mem"], g["mem"]
        for prec, got in (("fp32", fm), ("bf16", bm), ("g16", gm), ("bf16", b16["mem"])):  # the run's counts, as meshtrain --plan has them
            ranks = json.load(open("%s/%s.%s.plan.json" % (work, name, prec)))["ranks"]
            for cat in got:
                want = max(r["mem_bytes"][cat] + (scores(name, prec, r["pp"]) if cat == "activations" and att == "materialized" else 0)
                           for r in ranks if r["dp"] == 0 and r["tp"] == 0)
                if not close(got[cat], want):
                    sys.exit("FAIL: %s %s %s %s: meshplan %r, meshtrain --plan %r" % (att, name, prec, cat, got[cat], want))
        want = {"params": fm["params"] / 2 + fm["optimizer"] / 2, "grads": fm["grads"],
                "optimizer": fm["optimizer"], "gathered": fm["gathered"] / 2, "other": fm["other"]}
        for cat, w in want.items():
            if not close(bm[cat], w):
                sys.exit("FAIL: %s %s %s: bf16 %r, want %r (fp32 %r)" % (att, name, cat, bm[cat], w, fm[cat]))
        for cat, hi in (("activations", 0.6), ("comm", 0.8)):
            if fm[cat] and not (0.5 * fm[cat] <= bm[cat] <= hi * fm[cat]):
                sys.exit("FAIL: %s %s %s: bf16 %r is not 0.5-%g of fp32 %r" % (att, name, cat, bm[cat], hi, fm[cat]))
        for grp in ("tp", "pp"):  # the run's message bytes, about half of fp32's (fp32 scalar sums)
            for prec, got in (("fp32", f), ("bf16", b)):
                ranks = json.load(open("%s/%s.%s.plan.json" % (work, name, prec)))["ranks"]
                want = max(r["step_bytes"][grp] for r in ranks)
                if not close(got["step_bytes"][grp], want):
                    sys.exit("FAIL: %s %s %s: %s bytes %r, meshtrain --plan %r" % (att, name, prec, grp, got["step_bytes"][grp], want))
            fb, bb = f["step_bytes"][grp], b["step_bytes"][grp]
            hi = 0.52 if grp == "tp" else 0.8  # (pp: the tied embeddings' fp32 sum too)
            if fb and not (0.5 * fb <= bb <= hi * fb):
                sys.exit("FAIL: %s %s: %s bytes bf16 %r, fp32 %r" % (att, name, grp, bb, fb))
        # where activations or messages are priced, bf16 costs less time, never more
        if not (b["step_s"] <= f["step_s"]) or (name in ("tp2", "pp2") and not (b["step_s"] < f["step_s"])):
            sys.exit("FAIL: %s %s: step bf16 %r s, fp32 %r s" % (att, name, b["step_s"], f["step_s"]))
        print("%-12s %-4s fp32 %9d B (activ %8d, gathered %7d, tp %8d) bf16 %9d B (activ %8d, gathered %7d, tp %8d)" % (
            att, name, f["mem_bytes"], fm["activations"], fm["gathered"], f["step_bytes"]["tp"],
            b["mem_bytes"], bm["activations"], bm["gathered"], b["step_bytes"]["tp"]))
PY
echo PASS
