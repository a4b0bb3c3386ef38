# A failure found several calls deep reaches the user through one chain
# (core.h's error idiom): with MT_ERR_TRACE=1, rank 0's error line is
# followed by "meshtrain: error: at a.c:12 <- b.c:40 <- ...", the file:line
# where the error was set, then each caller that passed it up. Three damaged
# checkpoints given to train.resume (no training needed to make them):
#   garbled   a MANIFEST.json that is no JSON: set in the manifest check
#             (fs.c), passed up by the resolve (load.c) and the resume;
#   newer     a manifest of a newer major format version: set in the
#             version check, passed up by the manifest check (both fs.c)...
#   not_hdf5  a complete manifest whose ckpt.h5 is no HDF5 file: set where
#             rank 0 opens it (source.c), passed up through the source, the
#             load (load.c) and the resume.
# Each: every rank exits 2 by itself (no hang, no abort), two error lines,
# the chain names the files in that order, at least three frames, and each
# frame's line in the source is where the idiom sets or passes an error
# (MT_CKPT_RETURN_SCOPED passes it: its mt_err_pass takes the line it is on).
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
T=(--set model.preset=tiny --set parallel.dp=2 --set data.train="$corpus"
   --set train.global_batch=8 --set train.micro_batch=2)
hdr="$MT_SRC/lib/ckpt/ckpt.h"
version=$(awk '/define MT_CKPT_VERSION_(MAJOR|MINOR|PATCH)/ {v = v (v == "" ? "" : ".") $3}
               END {print v}' "$hdr")
format=$(awk -F'"' '/define MT_CKPT_FORMAT /{print $2}' "$hdr")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ && -n $format ]] || fail "cannot read the format from $hdr"

# case NAME REGEX CHAIN: resume from $WORK/NAME/step_4 (made by the caller);
# the error line must match REGEX, the chain's files (in order) CHAIN
case_run() {
  local name=$1 re=$2 chain=$3
  local out="$WORK/$name.err"
  set +e
  MT_ERR_TRACE=1 mt_mpirun_each 2 "$WORK/$name.exits" "$MT_BIN/meshtrain" "${T[@]}" \
    --set train.resume="$WORK/$name/step_4" --set output.dir="$WORK/out_$name" \
    > "$WORK/$name.out" 2> "$out"
  local rc=$?
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$name: hung"
  mt_each_exited "$WORK/$name.exits" 2 2 ||
    { cat "$out" "$WORK/$name.exits"; fail "$name: not every rank exited 2 by itself"; }
  ! grep -q "^\[rank" "$out" || { cat "$out"; fail "$name: a rank printed a fatal message"; }
  local n; n=$(grep -c "^meshtrain: error:" "$out" || true)
  [ "$n" -eq 2 ] || { cat "$out"; fail "$name: $n error lines, expected the error and its chain"; }
  local msg at
  msg=$(grep "^meshtrain: error:" "$out" | head -1)
  at=$(grep "^meshtrain: error:" "$out" | tail -1)
  [[ $msg =~ $re ]] || { cat "$out"; fail "$name: the error does not match /$re/"; }
  [[ $at =~ ^"meshtrain: error: at "(.*)$ ]] || { cat "$out"; fail "$name: no chain line"; }
  local frames=${BASH_REMATCH[1]} files="" frame file line src
  IFS='|' read -r -a list <<< "${frames// <- /|}"
  [ "${#list[@]}" -ge 3 ] || fail "$name: a chain of ${#list[@]} frame(s): $frames"
  for frame in "${list[@]}"; do
    [[ $frame =~ ^([a-z_0-9]+\.(c|cu)):([0-9]+)$ ]] || fail "$name: '$frame' is no file:line"
    file=${BASH_REMATCH[1]} line=${BASH_REMATCH[3]}
    files+="${files:+ }$file"
    # the frame's line (or one of the two before: a call over several lines)
    # sets or passes the error
    src=$(find "$MT_SRC/lib" -name "$file" | head -1)
    [ -n "$src" ] || fail "$name: $file is in no directory of lib/"
    sed -n "$((line > 2 ? line - 2 : 1)),${line}p" "$src" |
      grep -Eq "mt_err_(set|runtime|pass)|mt_ckpt_err_|MT_(MPI_)?TRY|MT_CKPT_RETURN_SCOPED" ||
      fail "$name: $file:$line neither sets nor passes an error: $(sed -n "${line}p" "$src")"
  done
  [[ $files =~ ^$chain$ ]] || fail "$name: the chain's files are '$files', expected /$chain/"
  echo "ok   $name: $msg"
  echo "     $at"
}

mkdir -p "$WORK/garbled/step_4"
echo '{not json' > "$WORK/garbled/step_4/MANIFEST.json"
case_run garbled "train\.resume: .*garbled/step_4/MANIFEST\.json: not a meshtrain checkpoint manifest" \
  "fs\.c load\.c( resume\.c)+"

mkdir -p "$WORK/newer/step_4"
printf '{"format": "%s", "version": "99.0.0", "step": 4, "mode": "shared", "files": []}\n' \
  "$format" > "$WORK/newer/step_4/MANIFEST.json"
case_run newer "train\.resume: .*newer/step_4: format version 99\.0\.0 is newer than this meshtrain reads" \
  "fs\.c fs\.c load\.c( resume\.c)+"

mkdir -p "$WORK/not_hdf5/step_4"
head -c 65536 /dev/zero | tr '\0' 'x' > "$WORK/not_hdf5/step_4/ckpt.h5"
printf '{"format": "%s", "version": "%s", "step": 4, "mode": "shared", "files": [{"name": "ckpt.h5", "bytes": 65536}]}\n' \
  "$format" "$version" > "$WORK/not_hdf5/step_4/MANIFEST.json"
case_run not_hdf5 "not_hdf5/step_4: rank 0 cannot open .*ckpt\.h5 as HDF5" \
  "source\.c( source\.c)* load\.c( load\.c)* resume\.c( resume\.c)*"
echo PASS
