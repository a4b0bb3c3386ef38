# Damaged or foreign checkpoints: the loader and meshckpt verify fail with
# one clear line naming the problem; nothing hangs.
source "$(dirname "$0")/common_ckpt.sh"
S=(--set train.steps=4 --set parallel.dp=2 --set train.micro_batch=2)
train good 2 "${S[@]}" --set output.dir="$WORK/good"
G="$WORK/good/checkpoints/step_4"
mt_mpirun 2 "$MT_BIN/meshckpt" verify "$G" --deep || fail "verify of a good checkpoint"

# expect_resume_fail NAME CKPT REGEX [extra args]: resuming from CKPT must fail
expect_resume_fail() {
  local name=$1 ck=$2 re=$3; shift 3
  set +e
  mt_mpirun_each 2 "$WORK/$name.exits" "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" --set train.steps=6 \
    --set train.resume="$ck" --set output.dir="$WORK/out_$name" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$name: hung"
  mt_each_failed "$WORK/$name.exits" 2 ||
    { cat "$WORK/$name.err" "$WORK/$name.exits"; fail "$name: a rank exited with 0, or not by itself"; }
  local n; n=$(grep -c "^meshtrain: error:" "$WORK/$name.err" || true)
  [ "$n" -eq 1 ] || { cat "$WORK/$name.err"; fail "$name: $n error lines"; }
  grep "^meshtrain: error:" "$WORK/$name.err" | grep -Eq -- "$re" || { cat "$WORK/$name.err"; fail "$name: message does not match /$re/"; }
  echo "ok   $name: $(grep '^meshtrain: error:' "$WORK/$name.err")"
}
copy() { rm -rf "$WORK/$1"; cp -r "$G" "$WORK/$1"; echo "$WORK/$1"; }

# a flipped byte inside a tensor's data
C=$(copy flipped)
addr=$(h5dump -p -H -d /model/wte.weight "$C/ckpt.h5" | awk '/OFFSET/ {print $2; exit}')
[ -n "$addr" ] || fail "cannot find the data address of wte.weight"
python3 - "$C/ckpt.h5" "$addr" <<'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2]) + 4 * 37
with open(path, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10]))
PY
expect_resume_fail flipped "$C" "checksum mismatch in /model/wte.weight"
set +e; "$MT_BIN/meshckpt" verify "$C" > "$WORK/verify_flipped.log" 2>&1; rc=$?; set -e
[ $rc -eq 1 ] && grep -q "/model/wte.weight: checksum mismatch" "$WORK/verify_flipped.log" \
  || { cat "$WORK/verify_flipped.log"; fail "verify did not name the corrupt tensor"; }

# a truncated file, a missing file
C=$(copy truncated); truncate -s 100000 "$C/ckpt.h5"
expect_resume_fail truncated "$C" "ckpt.h5 is 100000 bytes, the manifest says [0-9]+ \(truncated"
C=$(copy missing); rm "$C/ckpt.h5"
expect_resume_fail missing "$C" "missing file ckpt.h5"
# no manifest: not a complete checkpoint
C=$(copy nomanifest); rm "$C/MANIFEST.json"
expect_resume_fail nomanifest "$C" "holds no complete checkpoint"
# a newer major format version
C=$(copy newer); sed -i 's/"version":[^,]*/"version":\t"2.0.0"/' "$C/MANIFEST.json"
expect_resume_fail newer "$C" "format version 2.0.0 is newer than this meshtrain reads"
# a checkpoint of another model
expect_resume_fail other_model "$G" "checkpoint of another model: n_embd = 32 there, 64 in this run" --set model.n_embd=64
# a path that is not there
expect_resume_fail nothing "$WORK/no-such-dir" "no-such-dir: no such checkpoint"
echo PASS
