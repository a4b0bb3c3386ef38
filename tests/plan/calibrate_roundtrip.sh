# meshplan calibrate with the most matmul sizes a profile holds (32, at
# awkward values) writes a profile whose every line fits inih's 198
# characters, holds all 32 points, and loads back into meshplan; --attn
# naming a file without attention rows is refused.
source "$(dirname "$0")/../scripts/common.sh"
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
with open(w + "/gemm.jsonl", "w") as f:
    shapes = [{"m": 1000 + 37 * i, "n": 777 + 13 * i, "k": 3001 + 101 * i,
               "gflops": 1234.56789 + 1111.1111 * i} for i in range(40)]
    f.write(json.dumps({"bench": "gemm", "shapes": shapes}) + "\n")
with open(w + "/coll.jsonl", "w") as f:
    for b in (1024, 1 << 20, 1 << 24, 1 << 26):
        f.write(json.dumps({"bench": "allreduce", "nodes": 1, "ranks": 4, "bytes": b,
                            "time_us": 3.333 + b / 1.23e4, "busbw_gbs": 123.456789}) + "\n")
with open(w + "/stream.jsonl", "w") as f:
    f.write(json.dumps({"bench": "stream", "gbs": 1987.654321}) + "\n")
PY
"$MT_BIN/meshplan" calibrate --gemm "$WORK/gemm.jsonl" --coll "$WORK/coll.jsonl" \
  --stream "$WORK/stream.jsonl" --name roundtrip --devices-per-node 4 --mem-gib 64 \
  --out "$WORK/rt.ini" || fail "calibrate"
cat "$WORK/rt.ini"
long=$(awk 'length($0) > 198' "$WORK/rt.ini" | wc -l)
[ "$long" -eq 0 ] || fail "$long line(s) over 198 characters"
points=$(grep '^gemm =' "$WORK/rt.ini" | tr ' ' '\n' | grep -c ':')
[ "$points" -eq 32 ] || fail "$points matmul points written, expected 32"
"$MT_BIN/meshplan" --set model.preset=tiny --set train.global_batch=16 --hw "$WORK/rt.ini" \
  --nodes 1 --top 1 > "$WORK/plan.out" 2> "$WORK/plan.err" \
  || { cat "$WORK/plan.err"; fail "meshplan does not load the profile it wrote"; }
# --attn with no attention rows in it (the stream file): one line naming the
# file, exit 2, and no profile written
set +e
"$MT_BIN/meshplan" calibrate --gemm "$WORK/gemm.jsonl" --coll "$WORK/coll.jsonl" \
  --stream "$WORK/stream.jsonl" --attn "$WORK/stream.jsonl" --name roundtrip \
  --out "$WORK/attn.ini" > "$WORK/attn.out" 2> "$WORK/attn.err"
rc=$?
set -e
[ $rc -eq 2 ] && [ "$(grep -c . "$WORK/attn.err")" -eq 1 ] && [ ! -e "$WORK/attn.ini" ] &&
  grep -q "stream.jsonl: no meshbench attention rows" "$WORK/attn.err" ||
  { cat "$WORK/attn.err"; fail "--attn without attention rows: rc $rc"; }
echo "ok   $(cat "$WORK/attn.err")"
echo PASS
