# meshckpt import validates like a save (issue 23 item 3): a Hugging Face
# GPT-2 sharded over two safetensors files with model.safetensors.index.json
# imports to the same parameters, bitwise, as the single file; refused with
# one line each, exit 2 and nothing written: NaN weights, data_offsets that
# overlap, leave a gap or list a tensor twice, a weight_map that names the
# wrong shard, and a directory of PyTorch .bin weights only (saying so).
# A path that is not a model directory (missing, empty, a file) or a shard
# the index names but the directory lacks is bad input too, exit 2 (not the
# runtime failure 3 a job would retry), in import and import --check; a NUL
# inside a tensor name (JSON \u0000, which would cut the name) is refused.
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
train src 1 --set train.steps=2 --set train.micro_batch=8 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/latest"
mt_mpirun 1 "$M" export "$SRC" "$WORK/hf" --format hf > "$WORK/export.log" || { cat "$WORK/export.log"; fail "export"; }

# edit NAME PYTHON: a copy of the export; PYTHON changes the header h (name ->
# {dtype, shape, data_offsets}), the data bytes `data` or writes files in d
edit() {
  rm -rf "${WORK:?}/$1"; cp -r "$WORK/hf" "$WORK/$1"
  PYTHONPATH="$MT_SRC/tests/ckpt" python3 - "$WORK/$1" "$2" <<'PY'
import json, struct, sys
from safetensors_file import read, write
d, code = sys.argv[1], sys.argv[2]
h, data = read(f"{d}/model.safetensors")
exec(code)
PY
}
imported() { # NAME: import it; must work
  mt_mpirun 1 "$M" import "$WORK/$1" "$WORK/out_$1" --format hf > "$WORK/$1.log" 2>&1 \
    || { cat "$WORK/$1.log"; fail "$1: import failed"; }
}
refused() { hf_refused 1 "$@"; } # NAME REGEX

# sharded: two files and the index transformers writes
edit sharded '
import os
names = [k for k in h if k != "__metadata__"]
half = len(names) // 2
wmap = {}
for part, group in enumerate((names[:half], names[half:])):
    fname = f"model-{part + 1:05d}-of-00002.safetensors"
    sub, out, off = {"__metadata__": h.get("__metadata__", {})}, bytearray(), 0
    for k in group:
        b0, b1 = h[k]["data_offsets"]
        sub[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + b1 - b0]}
        out += data[b0:b1]; off += b1 - b0; wmap[k] = fname
    write(f"{d}/{fname}", sub, out)
os.remove(f"{d}/model.safetensors")
json.dump({"metadata": {"total_size": len(data)}, "weight_map": wmap}, open(f"{d}/model.safetensors.index.json", "w"))
'
imported sharded
"$M" diff "$SRC" "$WORK/out_sharded/latest" > "$WORK/sharded.diff" && grep -q "^diff: equal (every tensor bitwise" "$WORK/sharded.diff" \
  || { cat "$WORK/sharded.diff"; fail "the sharded import is not the parameters bitwise"; }
echo "ok   sharded: two shards and model.safetensors.index.json import bitwise"
cp -r "$WORK/sharded" "$WORK/wrong_map"
python3 - "$WORK/wrong_map/model.safetensors.index.json" <<'PY'
import json, sys
p = sys.argv[1]; x = json.load(open(p)); m = x["weight_map"]
m["transformer.ln_f.weight"] = "model-00001-of-00002.safetensors" if m["transformer.ln_f.weight"].startswith("model-00002") else "model-00002-of-00002.safetensors"
json.dump(x, open(p, "w"))
PY
refused wrong_map "transformer.ln_f.weight is in .*, the weight_map says"
# PyTorch weights only
rm -rf "$WORK/bin_only"; mkdir -p "$WORK/bin_only"; cp "$WORK/hf/config.json" "$WORK/bin_only/"
head -c 4096 /dev/zero > "$WORK/bin_only/pytorch_model.bin"
refused bin_only "holds PyTorch weights only \(pytorch_model.bin.*safetensors"
# values that are not finite
edit nan 'b0 = h["transformer.ln_f.weight"]["data_offsets"][0]; data[b0:b0 + 4] = struct.pack("<f", float("nan")); write(f"{d}/model.safetensors", h, data)'
refused nan "tensor transformer.ln_f.weight holds 1 NaN or Inf values: not imported"
# offsets that overlap (a tensor would take another's bytes), leave a gap, repeat a name
edit overlap 'h["transformer.h.0.ln_1.bias"]["data_offsets"] = list(h["transformer.h.0.ln_1.weight"]["data_offsets"]); write(f"{d}/model.safetensors", h, data)'
refused overlap "overlaps tensor .*without overlap"
edit gap '
k = "transformer.ln_f.bias"; b0 = h[k]["data_offsets"][0]
for v in h.values():
    if isinstance(v, dict) and "data_offsets" in v and v["data_offsets"][0] >= b0:
        v["data_offsets"] = [v["data_offsets"][0] + 8, v["data_offsets"][1] + 8]
data[b0:b0] = bytes(8); write(f"{d}/model.safetensors", h, data)'
refused gap "8 bytes before tensor .* belong to no tensor"
edit twice '
raw = json.dumps(h)
k = "\"transformer.ln_f.bias\": " + json.dumps(h["transformer.ln_f.bias"])
write(f"{d}/model.safetensors", h, data, raw.replace(k, k + ", " + k).encode())'
refused twice "tensor transformer.ln_f.bias is listed twice"
# a NUL inside a tensor name: cut there, transformer.ln_f.bias would read as transformer.ln_f
edit nul_name '
raw = json.dumps(h).replace("\"transformer.ln_f.bias\"", "\"transformer.ln_f\\u0000.bias\"")
write(f"{d}/model.safetensors", h, data, raw.encode())'
refused nul_name "model.safetensors: a JSON string holds a NUL \(byte [0-9]+ of the JSON, in \"transformer.ln_f\"...\)"
# paths that are no model directory, a shard missing: exit 2, in --check too
mkdir -p "$WORK/empty_dir"; touch "$WORK/a_file"
cp -r "$WORK/sharded" "$WORK/no_shard"; rm "$WORK/no_shard/model-00002-of-00002.safetensors"
refused no_such_dir "no_such_dir: cannot open the Hugging Face model directory: No such file or directory"
refused empty_dir "cannot read .*empty_dir/config.json: No such file or directory"
refused a_file "a_file is a file, not a Hugging Face model directory"
refused no_shard "cannot open .*no_shard/model-00002-of-00002.safetensors: No such file or directory"
for name in no_such_dir empty_dir a_file; do
  rc=0; "$M" import "$WORK/$name" "$WORK/out_check" --format hf --check > "$WORK/check_$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] || { cat "$WORK/check_$name.log"; fail "import --check of $name: rc $rc, want 2"; }
done
echo PASS
