#!/usr/bin/env bash
# Emulated against analytic step time (issue: time-warp emulation): for a
# few layouts of a 1.3B GPT (L=24 C=2048 H=16 T=2048 V=32000) on 16
# ranks of PROFILE (default h200, 8 per node: two nodes), the virtual
# device's step time (last of 3 steps) beside meshplan --only's, with the
# parts of each (virtual: metrics.jsonl's time_s and pipeline wait;
# analytic: compute, tp, bubble, p2p, exposed dp, optimizer). Not a test.
#   apps/scripts/bench-warp-vs-plan.sh [PROFILE=h200]
set -euo pipefail
cd "$(dirname "$0")/../.."
PROFILE=${1:-h200}
BIN=${MT_BIN:-build/bin}
OUT=${MT_OUT:-outputs/bench-warp-vs-plan}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
corpus=$OUT/corpus.txt
[ -f "$corpus" ] || "$BIN/meshdata" corpus "$corpus" --bytes 2000000 > /dev/null
model=(--set model.preset=custom --set model.n_layer=24 --set model.n_embd=2048 --set model.n_head=16
       --set model.seq_len=2048 --set model.vocab_size=32000 --set train.micro_batch=1
       --set train.global_batch=64)
layouts=("dp16-z1 --set parallel.dp=16 --set parallel.zero=1"
         "dp16-z3 --set parallel.dp=16 --set parallel.zero=3"
         "tp8-dp2 --set parallel.tp=8 --set parallel.dp=2 --set parallel.zero=1"
         "tp4sp-dp4 --set parallel.tp=4 --set parallel.sp=true --set parallel.dp=4 --set parallel.zero=1"
         "pp4-dp4-1f1b --set parallel.pp=4 --set parallel.dp=4 --set parallel.zero=1"
         "pp4-dp4-gpipe --set parallel.pp=4 --set parallel.dp=4 --set parallel.zero=1 --set parallel.schedule=gpipe"
         "pp4i2-tp2-dp2 --set parallel.pp=4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
         "pp2-tp8-rc --set parallel.pp=2 --set parallel.tp=8 --set train.recompute=true")
printf "%-15s %10s %10s %7s | %s\n" layout virtual_s analytic_s ratio "virtual parts (rank 0) | analytic parts"
for l in "${layouts[@]}"; do
  read -r name args <<< "$l"
  # shellcheck disable=SC2086
  "$BIN/meshplan" "${model[@]}" $args --hw "$PROFILE" --only > "$OUT/$name.plan.json"
  # shellcheck disable=SC2086
  nice -n 19 mpirun --oversubscribe --bind-to none -n 16 "$BIN/meshtrain" "${model[@]}" $args \
    --set data.train="$corpus" --set train.steps=3 --set train.eval_every=0 --set ckpt.mode=none \
    --set train.device=virtual --set train.virtual_hw="$PROFILE" --set output.dir="$OUT/$name" \
    > "$OUT/$name.log" 2>&1 || { tail -5 "$OUT/$name.log"; continue; }
  python3 - "$OUT" "$name" <<'PY'
import json, sys
out, name = sys.argv[1:3]
a = json.load(open("%s/%s.plan.json" % (out, name)))
r = [json.loads(l) for l in open("%s/%s/metrics.jsonl" % (out, name))][-1]
t = r["time_s"]
vp = "compute %.3f tp %.3f dp %.3f opt %.3f" % (t["compute"], t["tp_comm"], t["dp_comm"], t["optimizer"])
if "pp" in r and r["pp"]:
    vp += " ppwait %.3f" % r["pp"]["wait_s"][0]
ap = "compute %.3f tp %.3f bubble %.3f p2p %.3f dp %.3f/%.3f opt %.3f" % (
    a["compute_s"], a["tp_s"], a["pp_bubble_s"], a["pp_p2p_s"], a["dp_exposed_s"], a.get("dp_total_s", 0), a["optim_s"])
print("%-15s %10.4f %10.4f %7.3f | %s | %s" % (name, r["step_s"], a["step_s"], r["step_s"] / a["step_s"], vp, ap))
PY
done
