# Shared by the checkpoint tests: a tiny model, 10 steps, fixed global batch.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
CMP="$MT_SRC/tests/scripts/compare_runs.py"
base=(--set model.preset=tiny --set train.global_batch=8 --set data.train="$corpus"
      --set train.eval_every=0 --set train.warmup_steps=3 --set train.lr=3e-3)
# train NAME NP ARGS... : run meshtrain, fail the test if it fails
train() { mt_train "$1" "$2" "${base[@]}" "${@:3}"; }
# ckpt_mode MODE: the settings of a save mode (shared, per-writer, or async:
# per-writer, written in the background) in the array M
ckpt_mode() {
  case $1 in
    shared) M=(--set ckpt.mode=shared) ;;
    per-writer) M=(--set ckpt.mode=per-writer) ;;
    async) M=(--set ckpt.mode=per-writer --set ckpt.async=true) ;;
    *) fail "unknown mode $1" ;;
  esac
}
# hf_refused NP NAME REGEX: meshckpt import of the Hugging Face directory
# $WORK/NAME on NP ranks is refused: exit 2, one error line, matching REGEX,
# and no checkpoint written
hf_refused() {
  local np=$1 name=$2 re=$3 rc=0
  mt_mpirun "$np" "$MT_BIN/meshckpt" import "$WORK/$name" "$WORK/out_$name" --format hf \
    > "$WORK/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/$name.log")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; fail "$name: rc $rc, want one line matching /$re/"; }
  [ ! -e "$WORK/out_$name/step_0" ] || fail "$name: a checkpoint was written"
  echo "ok   $name: $(grep error: "$WORK/$name.log")"
}
# hf_step_loss NAME NP INIT SEQS ARGS...: the loss of the first step of
# meshtrain on NP ranks started from checkpoint INIT (train.init_from: its
# shape) on the windows of the byte file SEQS, a global batch of 4, into
# $loss (output.dir $WORK/NAME)
hf_step_loss() {
  local name=$1 np=$2 init=$3 seqs=$4; shift 4
  mt_train "$name" "$np" --set data.train="$seqs" --set data.val="$seqs" \
    --set train.global_batch=4 --set train.steps=1 --set train.eval_every=0 \
    --set train.init_from="$init" --set output.dir="$WORK/$name" "$@"
  loss=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" \
    "$WORK/$name/metrics.jsonl")
}
# hf_close WHAT REF GOT RTOL: |GOT - REF| <= RTOL x |REF| (printed), else the test fails
hf_close() {
  python3 - "$@" <<'PY' || fail "$1: meshtrain's loss is not the reference's within $4 (relative)"
import sys
what, ref, got, rtol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
d = abs(got - ref) / abs(ref)
print(f"{what}: reference {ref:.9f}, meshtrain {got:.9f}, relative difference {d:.1e}")
sys.exit(0 if d <= rtol else 1)
PY
}
# hf_same_params A B: checkpoints A and B hold the same parameters bitwise
hf_same_params() {
  "$MT_BIN/meshckpt" diff "$1" "$2" > "$WORK/diff.log" && grep -q "^diff: equal (every tensor bitwise" "$WORK/diff.log" \
    || { cat "$WORK/diff.log"; fail "$2 is not the parameters of $1 bitwise"; }
}
# rewrite NAME PYTHON: a copy of the Hugging Face export $WORK/hf (one
# model.safetensors) whose tensors (dict t: name -> [dtype, shape, bytes]) and
# config (cfg) PYTHON edits, written again as $WORK/NAME
rewrite() {
  rm -rf "${WORK:?}/$1"; cp -r "$WORK/hf" "$WORK/$1"
  PYTHONPATH="$MT_SRC/tests/ckpt" python3 - "$WORK/$1" "$2" <<'PY'
import json, sys
from safetensors_file import read, write
d, edit = sys.argv[1], sys.argv[2]
h, stored = read(f"{d}/model.safetensors")
meta = h.pop("__metadata__", {})
t = {k: [v["dtype"], v["shape"], bytes(stored[v["data_offsets"][0]:v["data_offsets"][1]])] for k, v in h.items()}
cfg = json.load(open(f"{d}/config.json"))
exec(edit)
out, off, data = {"__metadata__": meta}, 0, b""
for k, (dt, shape, raw) in t.items():
    out[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
    off += len(raw); data += raw
write(f"{d}/model.safetensors", out, data)
json.dump(cfg, open(f"{d}/config.json", "w"))
PY
}
# hf_expect DIR KEY=JSON...: DIR holds exactly its class's tensors and
# config.json those values (tests/ckpt/hf_expect.py)
hf_expect() {
  python3 "$MT_SRC/tests/ckpt/hf_expect.py" "$@" || fail "$1: not the class's names, shapes or config"
}
# hf_round_trip SRC HFDIR NAME: HFDIR imported on 2 ranks into $WORK/NAME
# verifies and holds SRC's parameters bitwise
hf_round_trip() {
  mt_mpirun 2 "$MT_BIN/meshckpt" import "$2" "$WORK/$3" --format hf > "$WORK/$3.log" 2>&1 \
    || { cat "$WORK/$3.log"; fail "import of $2"; }
  "$MT_BIN/meshckpt" verify "$WORK/$3/step_0" | grep -q "OK (step 0, .*parameters only" \
    || fail "the import of $2 does not verify"
  hf_same_params "$1" "$WORK/$3/step_0"
  echo "ok   import($2) is the parameters of $1 bitwise"
}
# hf_against_ref LABEL REF HFDIR IMPORT: the reference REF's loss of HFDIR on
# the 4 windows of 32 tokens of $WORK/seqs.txt (into $ref) against
# meshtrain's first step from IMPORT at dp 1 and at tp 2, within 1e-6
hf_against_ref() {
  local label=$1 script=$2 hf=$3 imp=$4
  ref=$(python3 "$script" "$hf" "$WORK/seqs.txt" 32) || fail "$label: the numpy reference failed"
  hf_step_loss "${label}_dp1" 1 "$imp" "$WORK/seqs.txt" --set train.micro_batch=4
  hf_close "$label, dp 1" "$ref" "$loss" 1e-6
  hf_step_loss "${label}_tp2" 2 "$imp" "$WORK/seqs.txt" --set train.micro_batch=4 --set parallel.tp=2
  hf_close "$label, tp 2" "$ref" "$loss" 1e-6
}
# hf_differs WHAT A B: the reference's losses A and B differ by more than
# 1e-4 (relative): what WHAT changed matters to the comparison above
hf_differs() {
  python3 -c "import sys; a, b = map(float, sys.argv[2:]); d = abs(a - b) / a; print(f'{sys.argv[1]} moves the loss by {d:.1e} (relative)'); sys.exit(0 if d > 1e-4 else 1)" \
    "$@" || fail "$1 changes nothing here: the test could not catch it done wrong"
}
# hf_bf16 SRC REF_SCRIPT: the bf16 export of SRC is the model within bf16
# rounding: its reference loss within 5e-3 (relative), not equal, to $ref
hf_bf16() {
  mt_mpirun 1 "$MT_BIN/meshckpt" export "$1" "$WORK/hf16" --format hf --dtype bf16 > /dev/null || fail "bf16 export"
  grep -q '"torch_dtype": "bfloat16"' "$WORK/hf16/config.json" || fail "bf16 export: config"
  local ref16
  ref16=$(python3 "$2" "$WORK/hf16" "$WORK/seqs.txt" 32)
  python3 -c "import sys; d = abs(float(sys.argv[1]) - float(sys.argv[2])) / float(sys.argv[1]); print(f'bf16 export: loss {sys.argv[2]} ({d:.1e} relative from fp32)'); sys.exit(0 if 0 < d < 5e-3 else 1)" "$ref" "$ref16" \
    || fail "the bf16 export is not the model within bf16 rounding"
}
