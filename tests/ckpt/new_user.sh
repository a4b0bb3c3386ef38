# What a new user trips on (issue 23 items 7 and 8; issue 27's `latest`):
#   - train.init_from takes the model's shape from the checkpoint (no --set
#     of it needed); a --set that disagrees is refused with one line;
#   - fine-tuning at a shorter model.seq_len takes the first rows of the
#     position table and says so; a longer one is refused;
#   - `latest` is taken wherever a step directory is (train.resume,
#     train.init_from, meshckpt inspect, verify, diff, convert, export);
#   - meshckpt inspect shows the stored types (after convert --dtype bf16);
#   - meshckpt exit codes: 0 ok, 1 problems, 2 bad input, 3 runtime;
#   - a shared ckpt.h5 of a small model is about its tensors' bytes (datasets
#     are aligned to 1 MiB only from 16 MiB on).
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
T64=(--set model.seq_len=64)
train src 1 "${T64[@]}" --set train.steps=2 --set train.micro_batch=8 --set output.dir="$WORK/src"
L="$WORK/src/checkpoints/latest"
# the shared file of a small model: its tensors' bytes plus metadata
python3 - "$WORK/src/checkpoints/step_2/ckpt.h5" <<'PY' || fail "ckpt.h5 is much larger than its tensors"
import os, sys
# tiny at seq_len 64: wte 256x32, wpe 64x32, 2 blocks of 12 tensors, lnf
C, V, T, L = 32, 256, 64, 2
block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
params = V * C + T * C + L * block + 2 * C
size, tensors = os.path.getsize(sys.argv[1]), 3 * 4 * params
print(f"ckpt.h5: {size} bytes for {tensors} bytes of tensors ({size / tensors:.2f}x)")
sys.exit(0 if size <= 1.3 * tensors + (256 << 10) else 1)
PY
mt_mpirun 1 "$M" export "$L" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export latest"; }
mt_mpirun 1 "$M" import "$WORK/hf" "$WORK/imp" --format hf > "$WORK/import.log" || { cat "$WORK/import.log"; fail "import"; }

# init_from with no shape given at all (no preset either): the checkpoint's
ft() { # NAME ARGS...: a short run from the imported parameters, no preset
  local name=$1; shift
  mt_mpirun 1 "$MT_BIN/meshtrain" --set data.train="$corpus" --set train.global_batch=8 \
    --set train.micro_batch=8 --set train.eval_every=0 --set train.init_from="$WORK/imp/latest" \
    --set output.dir="$WORK/$name" "$@" > "$WORK/$name.log" 2>&1
}
ft shape --set train.steps=1 || { cat "$WORK/shape.log"; fail "init_from without the shape"; }
grep -q "(L=2 C=32 H=4 T=64 V=256)" "$WORK/shape.log" || { cat "$WORK/shape.log"; fail "the shape is not the checkpoint's"; }
grep -q "^n_layer = 2$" "$WORK/shape/config.ini" || fail "config.ini does not say the shape that ran"
echo "ok   init_from: the shape from the checkpoint (L=2 C=32 H=4 T=64 V=256)"
# a --set that disagrees, a longer context: one line, exit 2
refused() { # NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  set +e; ft "$name" --set train.steps=1 "$@"; local rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: rc $rc, want one line matching /$re/"; }
  echo "ok   $name: $(grep error: "$WORK/$name.log")"
}
refused disagree "train.init_from: model.n_layer = 3 \(given\), but .* holds a model with 2" --set model.n_layer=3
refused preset "train.init_from: model.n_layer = 12 \(gpt2-124m\)" --set model.preset=gpt2-124m
refused longer "model.seq_len = 128 is longer than the 64 positions" --set model.seq_len=128
# a shorter context: the first 32 rows of the position table (an update of
# 1e-30 leaves the float32 weights as they were)
ft short --set model.seq_len=32 --set train.steps=1 --set train.lr=1e-30 || { cat "$WORK/short.log"; fail "init_from at seq_len 32"; }
grep -q "fine-tuning at the shorter context with its first 32" "$WORK/short.log" || { cat "$WORK/short.log"; fail "the slicing is not said"; }
mt_mpirun 1 "$M" export "$WORK/short/checkpoints/latest" "$WORK/hf_short" --format hf > /dev/null || fail "export the short run"
python3 - "$WORK/hf" "$WORK/hf_short" <<'PY' || fail "the short run's position table is not the first 32 rows"
import json, struct, sys
def tensor(d, name):
    blob = open(f"{d}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]; h = json.loads(blob[8:8 + n])
    b0, b1 = h[name]["data_offsets"]
    return h[name]["shape"], blob[8 + n + b0: 8 + n + b1]
(s64, w64), (s32, w32) = tensor(sys.argv[1], "transformer.wpe.weight"), tensor(sys.argv[2], "transformer.wpe.weight")
assert s64 == [64, 32] and s32 == [32, 32], (s64, s32)
assert w32 == w64[:len(w32)], "rows differ"
print("the short run's wpe is the first 32 rows of the checkpoint's, bitwise")
PY
# `latest` for train.resume
train resumed 1 "${T64[@]}" --set train.steps=4 --set train.micro_batch=8 --set train.resume="$L" \
  --set output.dir="$WORK/src"
grep -q "resumed from .*step_2 " "$WORK/resumed.log" || { cat "$WORK/resumed.log"; fail "train.resume=.../latest"; }
# inspect shows the stored types; meshckpt's exit codes
mt_mpirun 1 "$M" convert "$L" "$WORK/bf" --dtype bf16 > /dev/null || fail "convert latest to bf16"
"$M" inspect "$WORK/bf/latest" > "$WORK/bf.inspect" || fail "inspect latest"
grep -Eq "^  model +[0-9]+ tensors, .* stored as bf16$" "$WORK/bf.inspect" &&
  grep -Eq "^  optim/exp_avg +[0-9]+ tensors, .* stored as fp32$" "$WORK/bf.inspect" \
  || { cat "$WORK/bf.inspect"; fail "inspect does not show the stored types"; }
code() { # WANT CMD...: the exit code of a meshckpt command
  local want=$1; shift
  set +e; "$@" > "$WORK/code.log" 2>&1; local rc=$?; set -e
  [ $rc -eq "$want" ] || { cat "$WORK/code.log"; fail "$*: exit $rc, want $want"; }
}
code 0 "$M" verify "$L"
code 1 "$M" diff "$L" "$WORK/bf/latest"
code 2 "$M" verify "$WORK/no-such-checkpoint"
code 2 "$M" inspect "$WORK/src/config.ini"
cp -r "$WORK/src/checkpoints/step_4" "$WORK/damaged"
truncate -s 1000 "$WORK/damaged/ckpt.h5"
code 1 "$M" verify "$WORK/damaged"
code 3 env MT_CKPT_FAULT="rank=0,op=write,errno=EIO" "$M" export "$L" "$WORK/model.h5"
grep -q "error: export: cannot write .*model.h5: Input/output error" "$WORK/code.log" || { cat "$WORK/code.log"; fail "export's I/O error"; }
echo "ok   meshckpt exit codes: 0 ok, 1 problems or different, 2 bad input, 3 I/O error"
echo PASS
