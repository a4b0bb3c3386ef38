# Configurations are checked when a job is written, not after the queue wait:
# `meshslurm.py render` and `campaign` run `meshtrain --check` on every train
# job and refuse one that would fail at start, with the line meshtrain itself
# prints when launched that way, writing nothing. Needs no Slurm.
source "$(dirname "$0")/../scripts/common.sh"
GEN="python3 $MT_SRC/slurm/meshslurm.py"
TINY=(--set model.preset=tiny --set train.global_batch=8 --set train.micro_batch=2 --set train.steps=4)

# refused WHAT ARGS...: meshslurm exits 2 with one line that ends in meshtrain's message
refused() {
  local what=$1; shift
  set +e; $GEN "$@" > "$WORK/out" 2> "$WORK/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$WORK/out" "$WORK/err"; fail "$what: meshslurm exited $rc, expected 2"; }
  [ "$(wc -l < "$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "$what: not one error line"; }
  echo "$what: $(cat "$WORK/err")"
}
# launched MESSAGE_FILE NP ARGS...: what meshtrain prints when launched on NP ranks
launched() {
  local file=$1 np=$2; shift 2
  set +e; mt_mpirun "$np" "$MT_BIN/meshtrain" "$@" > /dev/null 2> "$file.all"; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$file.all"; fail "meshtrain launched on $np ranks exited $rc, expected 2"; }
  grep '^meshtrain: error: ' "$file.all" | head -1 > "$file"
  [ -s "$file" ] || { cat "$file.all"; fail "meshtrain printed no error line"; }
}

# 1. a mistyped key: refused at render time with meshtrain's message
refused "mistyped key" render train --system local --nodes 1 --bin "$MT_BIN" --run-dir "$WORK/typo" \
  "${TINY[@]}" --set train.stpes=5
launched "$WORK/typo.msg" 2 --set parallel.dp=2 "${TINY[@]}" --set train.stpes=5 --set output.dir="$WORK/launched"
[ "$(cat "$WORK/err")" = "meshslurm: error: job not written: $(cat "$WORK/typo.msg")" ] ||
  fail "render's message '$(cat "$WORK/err")' is not meshtrain's '$(cat "$WORK/typo.msg")'"
grep -q "unknown key 'train.stpes' (did you mean 'train.steps'?)" "$WORK/err" || fail "the message does not name the key"
[ ! -e "$WORK/typo" ] || fail "a refused job left $WORK/typo behind"

# 2. a mesh that does not divide the model: 4 pipeline stages of a 2-layer model
refused "pp=4, 2 layers" render train --system local --nodes 2 --layout pp=4 --bin "$MT_BIN" \
  --run-dir "$WORK/mesh" "${TINY[@]}"
launched "$WORK/mesh.msg" 4 --set parallel.dp=1 --set parallel.pp=4 "${TINY[@]}" --set output.dir="$WORK/launched"
[ "$(cat "$WORK/err")" = "meshslurm: error: job not written: $(cat "$WORK/mesh.msg")" ] ||
  fail "render's message '$(cat "$WORK/err")' is not meshtrain's '$(cat "$WORK/mesh.msg")'"
grep -q "parallel.pp = 4 does not divide model.n_layer = 2" "$WORK/err" || fail "the message does not name the split"
[ ! -e "$WORK/mesh" ] || fail "a refused job left $WORK/mesh behind"

# 3. a batch that 4 ranks cannot split, also under --stdout (which writes nothing anyway)
refused "batch" render train --system local --nodes 2 --bin "$MT_BIN" --stdout "${TINY[@]}" --set train.global_batch=6
grep -q "train.global_batch = 6 is not divisible by train.micro_batch x parallel.dp = 2 x 4 = 8" "$WORK/err" ||
  fail "batch: '$(cat "$WORK/err")'"

# 4. campaigns: every point checked before anything is written; the error names the point
sweep() {  # sweep FILE GLOBAL_BATCH [SET_LINE]: ranks 2 and 4 of tiny
  cat > "$1" <<INI
[campaign]
name = check-test
system = local
ranks = 2, 4
steps = 4
[set]
model.preset = tiny
train.global_batch = $2
train.micro_batch = 2
${3:-}
INI
}
sweep "$WORK/typo.ini" 8 "train.stpes = 5"
refused "campaign, mistyped key" campaign "$WORK/typo.ini" --bin "$MT_BIN" --out "$WORK/camp-typo"
[ "$(cat "$WORK/err")" = "meshslurm: error: point n1-r2-dp2-tp1-pp1-cp1-rep0: $(cat "$WORK/typo.msg")" ] ||
  fail "campaign message '$(cat "$WORK/err")'"
[ ! -e "$WORK/camp-typo" ] || fail "a refused campaign left its directory behind"
# the 2-rank point is fine, the 4-rank one is not: still nothing written
sweep "$WORK/batch.ini" 4
refused "campaign, 4-rank point" campaign "$WORK/batch.ini" --bin "$MT_BIN" --out "$WORK/camp-batch"
grep -q "^meshslurm: error: point n2-r4-dp4-tp1-pp1-cp1-rep0: meshtrain: error: train.global_batch = 4 is not divisible" \
  "$WORK/err" || fail "campaign: '$(cat "$WORK/err")'"
[ ! -e "$WORK/camp-batch" ] || fail "a refused campaign left its directory behind"
refused "campaign dry run" campaign "$WORK/batch.ini" --bin "$MT_BIN" --out "$WORK/camp-batch" --dry-run

# 5. the good configuration is written; --no-check writes even the bad one;
#    no meshtrain to check with is an error that says how to go on
$GEN render train --system local --nodes 2 --bin "$MT_BIN" --run-dir "$WORK/good" "${TINY[@]}" > /dev/null ||
  fail "a valid job was refused"
[ -x "$WORK/good/job.sh" ] || fail "the valid job was not written"
$GEN render train --system local --nodes 1 --bin "$MT_BIN" --run-dir "$WORK/unchecked" --no-check \
  "${TINY[@]}" --set train.stpes=5 > /dev/null || fail "--no-check still refused"
refused "no binary" render train --system local --nodes 1 --bin "$WORK/nobin" --stdout "${TINY[@]}"
grep -q "cannot check the configuration: no $WORK/nobin/meshtrain (build first.*--no-check skips the check)" \
  "$WORK/err" || fail "no binary: '$(cat "$WORK/err")'"

# 6. meshtrain --check itself: OK line and exit 0; --ranks is required and checked
"$MT_BIN/meshtrain" --check --ranks 4 --set parallel.dp=4 "${TINY[@]}" > "$WORK/ok" || fail "--check refused a valid config"
grep -q "^meshtrain: check: OK for 4 ranks: model tiny" "$WORK/ok" || fail "--check: '$(cat "$WORK/ok")'"
for bad in "--check" "--check --ranks 0" "--check --ranks x" "--ranks 4"; do
  set +e; "$MT_BIN/meshtrain" $bad "${TINY[@]}" > /dev/null 2> "$WORK/e"; rc=$?; set -e
  [ "$rc" = 2 ] && [ "$(wc -l < "$WORK/e")" = 1 ] && grep -q -- "--ranks" "$WORK/e" ||
    fail "meshtrain $bad: exit $rc, '$(cat "$WORK/e")'"
done
# the rank count matters: dp=4 on 2 ranks is the launched mesh error
set +e; "$MT_BIN/meshtrain" --check --ranks 2 --set parallel.dp=4 "${TINY[@]}" 2> "$WORK/e"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "= 4 ranks does not match the 2 MPI ranks launched" "$WORK/e" || fail "--ranks 2: '$(cat "$WORK/e")'"
echo "PASS: render and campaign refuse, with meshtrain's message, what meshtrain would refuse"
