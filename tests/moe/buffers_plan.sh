# The planner prices MoE buffers at parallel.moe_buffer_factor x a balanced
# routing's rows (issue 40). DeepSeek-V3's shape as published on 256 GPUs
# (pp 4 interleaved by 8, dp = ep = 64, ZeRO-3, recompute), activations in
# fp32: for factors 0 (the worst routing), 1, 2 and 3, meshplan's
# activation bytes equal the largest of the count-only model's own counters
# (meshtrain --plan-json), and they grow by exactly what one factor's rows
# hold: a balanced routing brings a rank its N k = 4096 x 8 rows, held
# (recompute: the workspace's one MoE slot) as the permutations (2 ints),
# the experts' inputs (C), hidden pre-activations (2 Fe) and activations
# (Fe), plus a block's scratch: received rows (C), the experts' outputs
# (C) and their hidden gradients (Fe, 2 Fe). The worst routing, every one
# of the 64 sources sending min(k, E/ep) = 4 slots a token, is factor 32's.
# Both tools say how they sized the buffers.
MT_NAME=moe_buffers_plan
source "$(dirname "$0")/../scripts/common.sh"
S=(--set model.preset=custom --set model.arch=llama --set model.n_layer=64 --set model.n_embd=7168
   --set model.n_head=128 --set model.seq_len=4096 --set model.vocab_size=129280
   --set model.moe_experts=256 --set model.moe_topk=8 --set model.moe_ffn=2048
   --set model.moe_shared=1 --set model.moe_router=sigmoid --set train.global_batch=512
   --set parallel.pp=4 --set parallel.dp=64 --set parallel.ep=64 --set parallel.zero=3
   --set train.micro_batch=1 --set train.recompute=true --set parallel.schedule=interleaved
   --set parallel.virtual_stages=8)
for f in 0 1 2 3; do
  set +e
  "$MT_BIN/meshplan" --hw h100-sxm --only "${S[@]}" --set parallel.moe_buffer_factor=$f \
    --dtype acts=4 > "$WORK/f$f.json" 2> "$WORK/f$f.err"
  rc=$?
  set -e
  # exit 2: priced, but more than a device holds (the figures on stdout)
  [ $rc -eq 0 ] || [ $rc -eq 2 ] || { cat "$WORK/f$f.err"; fail "meshplan at factor $f"; }
  mt_plan "f$f" "${S[@]}" --set parallel.moe_buffer_factor=$f
done
grep -q "MoE buffers sized at 2 x a balanced routing's rows" "$WORK/f2.err" \
  || { cat "$WORK/f2.err"; fail "meshplan does not say how it sized the MoE buffers"; }
grep -q "MoE buffers (activations) sized at 2 x a balanced routing's rows" "$WORK/f2.plan.txt" \
  || { cat "$WORK/f2.plan.txt"; fail "meshtrain --plan does not say how it sized the MoE buffers"; }
python3 - "$WORK" <<'PY' || fail "the planned MoE buffers"
import json, sys
w, bad = sys.argv[1], 0
C, Fe, N, k, es = 7168, 2048, 4096, 8, 4
per_row = 2 * 4 + es * (C + 2 * Fe + Fe) + es * (C + C + Fe + 2 * Fe)
step = N * k * per_row
plan, count = {}, {}
for f in (0, 1, 2, 3):
    plan[f] = json.loads(open("%s/f%d.json" % (w, f)).readline())["mem"]["activations"]
    count[f] = max(r["mem_bytes"]["activations"]
                   for r in json.load(open("%s/f%d.plan.json" % (w, f)))["ranks"])
    print("factor %d: meshplan %.0f bytes of activations, the counted model %d"
          % (f, plan[f], count[f]))
    if not plan[f] == count[f]:
        print("FAIL: factor %d: meshplan %r, the count-only model %r" % (f, plan[f], count[f]))
        bad += 1
for f in (1, 2):
    if not count[f + 1] - count[f] == step:
        print("FAIL: factor %d -> %d adds %d bytes, not %d"
              % (f, f + 1, count[f + 1] - count[f], step))
        bad += 1
if not count[0] == count[1] + 31 * step:
    print("FAIL: the worst case holds %d bytes, not factor 32's %d"
          % (count[0], count[1] + 31 * step))
    bad += 1
if not bad:
    print("ok   %.2f GiB of activations a factor, the worst routing %.1f GiB more than factor 2"
          % (step / 2**30, (count[0] - count[2]) / 2**30))
sys.exit(1 if bad else 0)
PY
echo PASS
