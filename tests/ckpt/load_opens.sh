# Loading without a metadata storm (issue 14): at 4 ranks, only rank 0 reads
# MANIFEST.json and the main file; in per-writer mode every rank opens only
# the shard files holding boxes it needs (counted by the library's own trace,
# MT_CKPT_TRACE_OPENS, one line per file a rank opens to read); in shared mode
# every rank opens ckpt.h5 once. The loads resume the reference curve.
source "$(dirname "$0")/common_ckpt.sh"
L=(--set train.steps=8 --set parallel.tp=2 --set parallel.pp=2 --set train.micro_batch=4)
train ref 1 --set train.steps=8 --set train.micro_batch=4 --set output.dir="$WORK/ref"
for mode in per-writer shared; do
  train "save_$mode" 4 "${L[@]}" --set train.stop_after=4 --set ckpt.mode="$mode" \
    --set output.dir="$WORK/$mode"
  rm -f "$WORK/opens_$mode.txt"
  MT_CKPT_TRACE_OPENS="$WORK/opens_$mode.txt" train "load_$mode" 4 "${L[@]}" \
    --set train.resume=auto --set output.dir="$WORK/$mode"
  grep -q "resumed from .*step_4 " "$WORK/load_$mode.log" || fail "$mode: did not resume"
  python3 "$CMP" "$WORK/ref" "$WORK/$mode" --rtol 1e-5 --steps 8
  echo "files opened per rank ($mode), rank: files"
  python3 - "$WORK/opens_$mode.txt" "$mode" <<'PY'
import os, sys
path, mode = sys.argv[1], sys.argv[2]
opens = {}
for line in open(path):
    rank, f = line.split(None, 1)
    opens.setdefault(int(rank), []).append(os.path.basename(f.strip()))
for r in sorted(opens):
    print(f"  rank {r}: {len(opens[r])}: {' '.join(opens[r])}")
bad = []
main = "index.h5" if mode == "per-writer" else "ckpt.h5"
if opens.get(0, []).count("MANIFEST.json") != 1:
    bad.append("rank 0 did not read MANIFEST.json exactly once")
for r in (1, 2, 3):
    if "MANIFEST.json" in opens.get(r, []) or "index.h5" in opens.get(r, []):
        bad.append(f"rank {r} read the manifest or the index")
if mode == "per-writer":
    # writer = tp + 2 * stage. A rank reads its own shard, the tensors
    # replicated over tp of its stage (tp rank 0's shard) and, on the last
    # stage, its tp shard of the tied embedding (stage 0's writer)
    want = {0: {"shard-00000.h5"}, 1: {"shard-00001.h5", "shard-00000.h5"},
            2: {"shard-00002.h5", "shard-00000.h5"},
            3: {"shard-00003.h5", "shard-00002.h5", "shard-00001.h5"}}
    for r, files in want.items():
        got = [f for f in opens.get(r, []) if f.startswith("shard-")]
        if sorted(got) != sorted(files):
            bad.append(f"rank {r} opened {sorted(got)}, needs exactly {sorted(files)}")
else:
    for r in range(4):
        n = opens.get(r, []).count("ckpt.h5")
        if n != (2 if r == 0 else 1):  # rank 0: its metadata read, then the data
            bad.append(f"rank {r} opened ckpt.h5 {n} times")
if bad:
    print("FAIL: " + "; ".join(bad))
    sys.exit(1)
PY
done
# collective MPI-IO reads with hints from the configuration: the same curve
MT_CKPT_IO=collective train coll 4 "${L[@]}" --set train.resume="$WORK/shared/checkpoints/step_4" \
  --set ckpt.io_hints=cb_nodes=1,romio_cb_read=enable --set output.dir="$WORK/coll"
python3 "$CMP" "$WORK/ref" "$WORK/coll" --subset --rtol 1e-5
# malformed hints: refused when the configuration is read (one line, exit 2)
set +e
"$MT_BIN/meshtrain" --check "${base[@]}" "${L[@]}" --ranks 4 --set ckpt.io_hints="cb_nodes 4" > "$WORK/hints.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "ckpt.io_hints: 'cb_nodes 4' is not key=value" "$WORK/hints.log" \
  || { cat "$WORK/hints.log"; fail "malformed ckpt.io_hints: rc $rc"; }
echo PASS
