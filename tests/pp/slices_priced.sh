# Token slices as the virtual device and the plan price them (prices, not
# measured times: both are deterministic): a Llama-3-8B-shaped model (16
# blocks, 2048 positions, bf16) at pp 4 with one micro-batch a step. With
# k = 4 and 8 slices the step and the measured bubble fall below whole
# sequences' (gpipe: a micro-batch cannot fill four stages); meshplan --only
# prices each step within 10% of the virtual device's (5.8% at most when
# written); and meshplan's search picks slices for 4 sequences of 8192 on
# 32 H100s, where a pipeline has few micro-batches.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
printf '[data]\ntrain = %s\n' "$corpus" > "$WORK/plan.ini"
shape=(--set model.preset=llama3-8b --set model.n_layer=16 --set model.seq_len=2048
       --set parallel.pp=4 --set train.global_batch=1 --set train.micro_batch=1
       --set train.precision=bf16)
for k in 1 4 8; do
  sched=1f1b; [ "$k" = 1 ] && sched=gpipe
  mt_train "k$k" 4 "${shape[@]}" --set parallel.schedule=$sched --set parallel.pp_token_slices=$k \
    --set train.device=virtual --set train.virtual_hw=h100-sxm --set train.steps=3 \
    --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none \
    --set output.dir="$WORK/k$k"
  "$MT_BIN/meshplan" "$WORK/plan.ini" "${shape[@]}" --set parallel.schedule=$sched \
    --set parallel.pp_token_slices=$k --hw h100-sxm --only > "$WORK/k$k.plan.json" \
    || fail "meshplan --only (k $k)"
done
"$MT_BIN/meshplan" "$WORK/plan.ini" --set model.preset=llama3-8b --set model.seq_len=8192 \
  --set train.global_batch=4 --hw h100-sxm --ranks 32 --top 1 --json "$WORK/search.json" \
  > "$WORK/search.txt" || fail "meshplan search"
python3 - "$WORK" <<'PY' || fail "token slices priced wrong"
import json, sys
w = sys.argv[1]
def last(run):
    return [json.loads(x) for x in open(f"{w}/{run}/metrics.jsonl")][-1]
ok, prev = True, None
for k in (1, 4, 8):
    r, p = last(f"k{k}"), json.load(open(f"{w}/k{k}.plan.json"))
    bub = sum(r["pp"]["bubble"]) / len(r["pp"]["bubble"])
    err = p["step_s"] / r["step_s"] - 1
    print(f"k {k}: virtual step {r['step_s'] * 1e3:.2f} ms, bubble {bub:.3f}; "
          f"meshplan step {p['step_s'] * 1e3:.2f} ms ({100 * err:+.1f}%)")
    ok &= abs(err) <= 0.10 and p["pp_token_slices"] == k
    if prev:
        ok &= r["step_s"] < prev[0] and bub < prev[1]
    prev = (r["step_s"], bub)
rows = json.load(open(f"{w}/search.json"))
rows = rows["layouts"] if isinstance(rows, dict) else rows
top = rows[0]
print("search's first layout:", {k: top[k] for k in ("tp", "pp", "dp", "schedule",
                                                     "virtual_stages", "pp_token_slices")})
ok &= top["pp"] > 1 and top["pp_token_slices"] > 1
sys.exit(0 if ok else 1)
PY
echo "PASS: token slices priced"
