# The ladder's overlap as the virtual device and the plan price it (prices,
# not measured times: both are deterministic): a Llama-3-8B-shaped model
# (2 blocks, 2048 positions) at tp = 4, without and with sp. Each block's
# attention sum over tp runs while its MLP computes, so the exposed tp time
# of a ladder step (time_s.tp_comm) is below the standard residual's, with
# the same tp bytes; meshplan --only prices it below too.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
shape=(--set model.preset=llama3-8b --set model.n_layer=2 --set model.seq_len=2048
       --set parallel.tp=4 --set train.global_batch=1 --set train.micro_batch=1)
for sp in false true; do
  for r in standard ladder; do
    mt_train "$r-$sp" 4 "${shape[@]}" --set parallel.sp=$sp --set model.residual=$r \
      --set train.device=virtual --set train.virtual_hw=h100-sxm --set train.steps=3 \
      --set data.train="$corpus" --set train.eval_every=0 --set ckpt.mode=none \
      --set output.dir="$WORK/$r-$sp"
    printf '[data]\ntrain = %s\n' "$corpus" > "$WORK/plan.ini"
    "$MT_BIN/meshplan" "$WORK/plan.ini" "${shape[@]}" --set parallel.sp=$sp \
      --set model.residual=$r --hw h100-sxm --only > "$WORK/$r-$sp.plan.json" \
      || fail "meshplan --only ($r, sp $sp)"
  done
done
python3 - "$WORK" <<'PY' || fail "the ladder hides no tp time"
import json, sys
w = sys.argv[1]
def last(run):
    recs = [json.loads(x) for x in open(f"{w}/{run}/metrics.jsonl") if '"tp_comm"' in x]
    return recs[-1]
ok = True
for sp in ("false", "true"):
    s, l = last(f"standard-{sp}"), last(f"ladder-{sp}")
    ps = json.load(open(f"{w}/standard-{sp}.plan.json"))
    pl = json.load(open(f"{w}/ladder-{sp}.plan.json"))
    ts, tl = s["time_s"]["tp_comm"], l["time_s"]["tp_comm"]
    print(f"sp {sp}: virtual tp_comm {ts * 1e3:.3f} -> {tl * 1e3:.3f} ms, "
          f"plan tp_s {ps['tp_s'] * 1e3:.3f} -> {pl['tp_s'] * 1e3:.3f} ms")
    ok &= s["tp_bytes"] == l["tp_bytes"] and tl < ts and pl["tp_s"] < ps["tp_s"]
sys.exit(0 if ok else 1)
PY
echo "PASS: the ladder's overlap priced"
