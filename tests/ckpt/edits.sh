# edits.sh MODE: checkpoints edited or damaged by hand (attributes, index,
# manifest, values) are refused alike by the loader (one line, every rank
# exits non-zero, nothing hangs) and by meshckpt verify (exit 1, the same
# reason); a corrupt index size is refused before anything is allocated.
MT_SUFFIX=$1
MODE=$1
source "$(dirname "$0")/common_ckpt.sh"
EDIT="$MT_TESTBIN/ckpt_edit"
S=(--set train.steps=4 --set parallel.dp=2 --set train.micro_batch=2 --set ckpt.mode="$MODE")
train good 2 "${S[@]}" --set output.dir="$WORK/good"
G="$WORK/good/checkpoints/step_4"
MAIN=$([ "$MODE" = shared ] && echo ckpt.h5 || echo index.h5)
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$G" --deep > "$WORK/verify_good.log" \
  || { cat "$WORK/verify_good.log"; fail "verify of a good checkpoint"; }

# the sizes in MANIFEST.json made to match the files again (as a tool that
# "repairs" a checkpoint after editing it would)
fix_manifest() {
  python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "MANIFEST.json")))
for f in m["files"]:
    f["bytes"] = os.path.getsize(os.path.join(d, f["name"]))
json.dump(m, open(os.path.join(d, "MANIFEST.json"), "w"), indent=1)
PY
}
# copy NAME: a fresh copy of the good checkpoint
copy() { rm -rf "$WORK/$1"; cp -r "$G" "$WORK/$1"; echo "$WORK/$1"; }
# edited NAME EDIT_ARGS...: a copy with ckpt_edit applied to its main file
edited() {
  local name=$1; shift
  local c; c=$(copy "$name")
  "$EDIT" "$c/$MAIN" "$@" || fail "$name: ckpt_edit $*"
  fix_manifest "$c"
  echo "$c"
}
# manifest NAME PYTHON: a copy whose manifest m is changed by PYTHON
manifest() {
  local c; c=$(copy "$1")
  python3 - "$c/MANIFEST.json" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
  echo "$c"
}

# refused NAME CKPT LOAD_REGEX VERIFY_REGEX [meshtrain args]: resuming from
# CKPT fails with one line matching LOAD_REGEX; meshckpt verify finds it
refused() {
  local name=$1 ck=$2 re=$3 vre=$4; shift 4
  set +e
  mt_mpirun_each 2 "$WORK/$name.exits" "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
    --set train.steps=6 --set train.resume="$ck" --set output.dir="$WORK/out_$name" "$@" \
    > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?
  mt_mpirun_each 2 "$WORK/$name.vexits" "$MT_BIN/meshckpt" verify "$ck" --deep \
    > "$WORK/$name.verify" 2>&1
  local vrc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ $vrc -ne 124 ] && [ $vrc -ne 137 ] || fail "$name: hung"
  mt_each_failed "$WORK/$name.exits" 2 ||
    { cat "$WORK/$name.err" "$WORK/$name.exits"; fail "$name: a rank exited with 0, or not by itself"; }
  vrc=$(awk '{ print $1 }' "$WORK/$name.vexits" | sort -u | xargs)  # "1": every rank exited 1
  local n; n=$(grep -c "^meshtrain: error:" "$WORK/$name.err" || true)
  [ "$n" -eq 1 ] || { cat "$WORK/$name.err"; fail "$name: $n error lines"; }
  grep "^meshtrain: error:" "$WORK/$name.err" | grep -Eq -- "$re" \
    || { cat "$WORK/$name.err"; fail "$name: load message does not match /$re/"; }
  ! grep -q "out of memory\|fatal" "$WORK/$name.err" || { cat "$WORK/$name.err"; fail "$name: fatal"; }
  [ "$vrc" = 1 ] && grep -Eq -- "$vre" "$WORK/$name.verify" \
    || { cat "$WORK/$name.verify"; fail "$name: verify rc $vrc, no line matching /$vre/"; }
  echo "ok   $name: $(grep '^meshtrain: error:' "$WORK/$name.err")"
}

# one box removed from the index: a hole, never zeros
C=$(edited drop_box drop-box 3)
refused drop_box "$C" "missing from the index" "missing from the index"
# root attributes that resume uses, edited: the checksum of the attributes
C=$(edited samples set-attr samples 12345)
refused samples "$C" "do not match their checksum" "do not match their checksum"
# (the cases marked "either mode" read the main file's attributes or the
# manifest by the same code in both modes: the shared run alone takes them)
if [ "$MODE" = shared ]; then  # either mode
  C=$(edited optimizer_step set-attr optimizer_step 1)
  refused optimizer_step "$C" "do not match their checksum" "do not match their checksum"
  C=$(edited seed set-attr seed 7)
  refused seed "$C" "do not match their checksum" "do not match their checksum"
  C=$(edited n_embd set-attr n_embd 64)
  refused n_embd "$C" "do not match their checksum" "do not match their checksum"
fi
# ... and with the checksum made to match: the model no longer fits the tensors
C=$(edited n_embd_rehashed set-attr n_embd 64); "$EDIT" "$C/$MAIN" rehash
refused n_embd_rehashed "$C" "checkpoint of another model: n_embd = 64 there, 32 in this run" \
  "wte.weight: shape \[256, 32\], the model of the root attributes has \[256, 64\]"
# the MoE shape (format 1.2) is covered by the checksum too
if [ "$MODE" = shared ]; then  # either mode
  C=$(edited moe_experts set-attr moe_experts 8)
  refused moe_experts "$C" "do not match their checksum" "do not match their checksum"
fi
# a checkpoint of format 1.1 (before the MoE attributes) still loads, as a
# dense model; one of 1.2 without them is incomplete
rm -rf "$WORK/v11"; mkdir -p "$WORK/v11"; cp -r "$G" "$WORK/v11/step_4"; C="$WORK/v11/step_4"
"$EDIT" "$C/$MAIN" set-str-attr version 1.1.0
for a in moe_experts moe_topk moe_every moe_ffn moe_shared ep etp; do "$EDIT" "$C/$MAIN" delete-attr $a; done
"$EDIT" "$C/$MAIN" rehash
fix_manifest "$C"
python3 - "$C/MANIFEST.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["version"] = "1.1.0"; json.dump(m, open(sys.argv[1], "w"))
PY
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$C" > "$WORK/v11.verify" || { cat "$WORK/v11.verify"; fail "v11: verify"; }
mt_mpirun 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set train.steps=5 --set train.resume="$C" \
  --set output.dir="$WORK/out_v11" > "$WORK/v11.log" 2>&1 || { cat "$WORK/v11.log"; fail "v11: resume"; }
grep -q "resumed from .*v11/step_4 (step 4" "$WORK/v11.log" || fail "v11: not resumed"
echo "ok   v11: a format 1.1 checkpoint (no MoE attributes) verifies and resumes"
C=$(edited v12_no_moe delete-attr moe_ffn); "$EDIT" "$C/$MAIN" rehash; fix_manifest "$C"
refused v12_no_moe "$C" "checkpoint metadata incomplete" "checkpoint metadata incomplete"
C=$(edited format set-str-attr format other-format)
refused format "$C" "not a meshtrain checkpoint" "not a meshtrain checkpoint"
# an index that claims 10^12 boxes: refused before any allocation
C=$(edited index_size index-rows 1000000000000)
refused index_size "$C" "claims 1000000000000 boxes, more than the checkpoint's [0-9]+ bytes" \
  "claims 1000000000000 boxes"
if [ "$MODE" = shared ]; then  # either mode
  # manifests: an older format version, no files, an unknown mode
  C=$(manifest older 'm["version"] = "0.9.0"')
  refused older "$C" "format version 0.9.0 is older than any this meshtrain reads" "0.9.0 is older"
  C=$(manifest no_files 'm["files"] = []')
  refused no_files "$C" "the manifest lists no files" "the manifest lists no files"
  C=$(manifest mode_none 'm["mode"] = "none"')
  refused mode_none "$C" "mode 'none' cannot be read" "mode 'none' cannot be read"
  # NaN and Inf saved with a matching checksum: refused by the checksum pass
  # and, without it, when read
  C=$(edited nan set-value /model/wte.weight 37 nan)
  refused nan "$C" "NaN or Inf values in /model/wte.weight box" "wte.weight: NaN or Inf values"
  refused nan_noverify "$C" "NaN or Inf values in /model/wte.weight" "wte.weight: NaN or Inf" \
    --set ckpt.verify_on_load=false
  C=$(edited inf set-value /optim/exp_avg_sq/lnf.weight 3 inf)
  refused inf "$C" "NaN or Inf values in /optim/exp_avg_sq/lnf.weight" "lnf.weight: NaN or Inf"
fi
echo PASS
