# meshplan under ASan/UBSan (the sanitize label runs it in build-asan): its
# replay of the plan's recorded collectives (plan/cost_replay.c, comm's
# record.c) on one stage at ZeRO-3 and MoE at ZeRO-2, a pipeline of 4
# stages with dp (the stages' lockstep, the tied embeddings' exchange),
# interleaved with tp, token slices, and a whole search; each answer's step
# at least its compute, dp's exposure at most what the step adds to it.
source "$(dirname "$0")/../scripts/common.sh"
base=(--set model.preset=tiny --set model.n_layer=4 --set train.global_batch=16
      --set train.micro_batch=1 --hw h100-sxm)
cases=("--set parallel.dp=8 --set parallel.zero=3"
       "--set parallel.dp=4 --set parallel.zero=2 --set model.moe_experts=4 --set parallel.ep=2"
       "--set parallel.pp=4 --set parallel.dp=2 --set parallel.zero=1"
       "--set parallel.pp=2 --set parallel.tp=2 --set parallel.dp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
       "--set parallel.pp=2 --set parallel.dp=2 --set parallel.pp_token_slices=2 --set model.seq_len=128")
i=0
for c in "${cases[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$MT_BIN/meshplan" "${base[@]}" $c --only > "$WORK/c$i.json" 2> "$WORK/c$i.err" ||
    { cat "$WORK/c$i.err"; fail "case $i ($c): meshplan"; }
  python3 - "$WORK/c$i.json" "$c" <<'PY' || fail "case $i: the price's parts do not add up"
import json, sys
d = json.loads(open(sys.argv[1]).readline())
ok = d["step_s"] >= d["compute_s"] > 0 and 0 <= d["dp_exposed_s"] <= d["step_s"] - d["compute_s"]
print("ok " if ok else "BAD", sys.argv[2], "step %.6g compute %.6g dp exposed %.6g" %
      (d["step_s"], d["compute_s"], d["dp_exposed_s"]))
sys.exit(0 if ok else 1)
PY
done
"$MT_BIN/meshplan" "${base[@]}" --ranks 8 --top 3 > "$WORK/search.txt" 2>&1 ||
  { cat "$WORK/search.txt"; fail "the search"; }
grep -q "^ *1 " "$WORK/search.txt" || { cat "$WORK/search.txt"; fail "the search ranked nothing"; }
echo PASS
