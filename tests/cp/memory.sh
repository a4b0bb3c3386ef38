# Attention activations per rank grow as O(T): a tiny model (L=2, C=32, 4
# heads) trained one step at T = 1024, 4096 and 8192 (micro-batch 1) holds
# activations (the allocator's peak, summary.json) proportional to T: at 4x
# and 8x the tokens, 4x and 8x the bytes within 1%. A T x T probability
# matrix per head and layer (what attention kept before) would be 2 x 4 x
# 8192^2 x 4 bytes = 2 GiB at T = 8192, plus as much scratch; measured is a
# few MiB. Ring context parallelism over 2 ranks halves it per rank (within
# 5%: its merge scratch). The figures are printed.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set train.steps=1 --set train.global_batch=1
        --set train.micro_batch=1 --set data.train="$corpus" --set train.eval_every=0
        --set ckpt.mode=none)
for T in 1024 4096 8192; do
  mt_mpirun 1 "$MT_BIN/meshtrain" "${common[@]}" --set model.seq_len=$T \
    --set output.dir="$WORK/t$T" > "$WORK/t$T.log" 2>&1 || { cat "$WORK/t$T.log"; fail "T=$T"; }
done
mt_mpirun 2 "$MT_BIN/meshtrain" "${common[@]}" --set model.seq_len=8192 --set parallel.cp=2 \
  --set output.dir="$WORK/cp2" > "$WORK/cp2.log" 2>&1 || { cat "$WORK/cp2.log"; fail "cp=2"; }
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def act(run, rank=0):
    s = json.load(open("%s/%s/summary.json" % (work, run)))
    return max(r["mem_peak_bytes"]["activations"] for r in s["ranks"])
a = {T: act("t%d" % T) for T in (1024, 4096, 8192)}
for T in (1024, 4096, 8192):
    print("T=%5d: activations %10d bytes (%.1f MiB), %.1f bytes per token; a T x T matrix per "
          "head and layer alone: %.0f MiB" % (T, a[T], a[T] / 2**20, a[T] / T,
                                               2 * 4 * T * T * 4 / 2**20))
bad = 0
for T in (4096, 8192):
    ratio = a[T] / a[1024]
    ok = abs(ratio / (T / 1024) - 1) <= 0.01
    print("T=%d / T=1024: %.3f (O(T): %d) %s" % (T, ratio, T // 1024, "ok" if ok else "FAIL"))
    bad += not ok
cp2 = act("cp2")
ratio = cp2 / a[8192]
ok = abs(ratio - 0.5) <= 0.025
print("T=8192, ring cp=2: %d bytes per rank, %.3f of one rank's (expected 0.5) %s"
      % (cp2, ratio, "ok" if ok else "FAIL"))
bad += not ok
sys.exit(1 if bad else 0)
PY
echo PASS
