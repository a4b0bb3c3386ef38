# Configurations are checked when a job is written, not after the queue wait:
# `meshslurm.py render` and `campaign` run `meshtrain --check` on every train
# job and refuse one that would fail at start, with the line meshtrain itself
# prints when launched that way (and a hint naming the option that fixes it),
# writing nothing; the same for data files that are missing or hold token ids
# beyond the vocabulary, and for ckpt-convert jobs (`meshckpt ARGS --check`:
# arguments parsed, the checkpoint read). Campaigns say which QoS each point
# gets and take --set. Needs no Slurm.
source "$(dirname "$0")/../scripts/common.sh"
GEN="python3 $MT_SRC/slurm/meshslurm.py"
corpus=$(mt_corpus 100000)
TINY=(--set model.preset=tiny --set train.global_batch=8 --set train.micro_batch=2 --set train.steps=4
      --set data.train="$corpus")

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
[ "$(cat "$WORK/err")" = "meshslurm: error: job not written: $(cat "$WORK/mesh.msg") (--layout pp=N with N one of 1, 2)" ] ||
  fail "render's message '$(cat "$WORK/err")' is not meshtrain's '$(cat "$WORK/mesh.msg")' and the hint"
grep -q "parallel.pp = 4 does not divide model.n_layer = 2" "$WORK/err" || fail "the message does not name the split"
[ ! -e "$WORK/mesh" ] || fail "a refused job left $WORK/mesh behind"

# 3. a batch that 4 ranks cannot split, also under --stdout (which writes nothing anyway)
refused "batch" render train --system local --nodes 2 --bin "$MT_BIN" --stdout "${TINY[@]}" --set train.global_batch=6
grep -q "train.global_batch = 6 is not divisible by train.micro_batch x parallel.dp = 2 x 4 = 8" "$WORK/err" ||
  fail "batch: '$(cat "$WORK/err")'"
# the hint names what fixes it for these 4 ranks, and each fix is accepted
# (not tp=4: the local nodes hold 2 tasks, and tp stays inside a node)
grep -q "(4 ranks here; any of: --set train.global_batch=8, --nodes 1 --ranks 1)$" "$WORK/err" ||
  fail "batch hint: '$(cat "$WORK/err")'"
# on nodes of 4 tasks the same 4 ranks take tp=4 inside one node: offered
refused "batch, nodes of 4" render train --system local --nodes 1 --tasks-per-node 4 --bin "$MT_BIN" --stdout \
  "${TINY[@]}" --set train.global_batch=6
grep -q "(4 ranks here; any of: --set train.global_batch=8, --layout dp=1,tp=4, --nodes 1 --ranks 1)$" "$WORK/err" ||
  fail "batch hint, nodes of 4: '$(cat "$WORK/err")'"
refused "batch 16, micro 8" render train --system local --nodes 2 --bin "$MT_BIN" --stdout "${TINY[@]}" \
  --set train.global_batch=16 --set train.micro_batch=8
hint=$(sed -n 's/.*(4 ranks here; any of: \(.*\))$/\1/p' "$WORK/err")
[ "$hint" = "--set train.micro_batch=4, --set train.global_batch=32, --layout dp=2,tp=2, --nodes 1 (2 ranks)" ] ||
  fail "batch hint: '$(cat "$WORK/err")'"
for fix in "--set train.micro_batch=4" "--set train.global_batch=32" "--layout dp=2,tp=2" "--nodes 1"; do
  # shellcheck disable=SC2086
  $GEN render train --system local --nodes 2 --bin "$MT_BIN" --stdout "${TINY[@]}" --set train.global_batch=16 \
    --set train.micro_batch=8 $fix > /dev/null 2> "$WORK/e" || fail "the hint's '$fix' is refused: $(cat "$WORK/e")"
done
for fix in "--nodes 1 --ranks 1"; do
  # shellcheck disable=SC2086
  $GEN render train --system local --nodes 2 --bin "$MT_BIN" --stdout "${TINY[@]}" --set train.global_batch=6 \
    $fix > /dev/null 2> "$WORK/e" || fail "the hint's '$fix' is refused: $(cat "$WORK/e")"
done
refused "ranks on too few nodes" render train --system local --nodes 1 --ranks 3 --bin "$MT_BIN" --stdout "${TINY[@]}"
grep -q "3 ranks do not fit on 1 nodes x 2 tasks per node (--nodes 2, or --tasks-per-node 3)" "$WORK/err" || fail "$(cat "$WORK/err")"

# 3b. data: a missing file and a file beyond the vocabulary, refused before the job is written
refused "missing data" render train --system local --nodes 1 --bin "$MT_BIN" --run-dir "$WORK/nodata" "${TINY[@]}" \
  --set data.train=no/such/corpus.txt
grep -q "^meshslurm: error: job not written: data.train = no/such/corpus.txt: no such file under the job's working directory $MT_SRC" \
  "$WORK/err" || fail "missing data: '$(cat "$WORK/err")'"
[ ! -e "$WORK/nodata" ] || fail "a refused job left $WORK/nodata behind"
for _ in $(seq 1 200); do echo "1 2 3 300 7"; done > "$WORK/ids.txt"
"$MT_BIN/meshdata" encode "$WORK/ids.txt" "$WORK/ids.bin" --from ids --format u16 > /dev/null
refused "data beyond the vocabulary" render train --system local --nodes 1 --bin "$MT_BIN" --stdout "${TINY[@]}" \
  --set data.train="$WORK/ids.bin" --set data.format=u16
grep -q "data.train = $WORK/ids.bin holds token ids up to 300, beyond the model's vocabulary of 256 (--set model.vocab_size=301" \
  "$WORK/err" || fail "vocabulary: '$(cat "$WORK/err")'"
$GEN render train --system local --nodes 1 --bin "$MT_BIN" --stdout "${TINY[@]}" --set data.train="$WORK/ids.bin" \
  --set data.format=u16 --set model.vocab_size=301 > /dev/null || fail "data that fits model.vocab_size=301 refused"
refused "missing validation data" render train --system local --nodes 1 --bin "$MT_BIN" --stdout "${TINY[@]}" \
  --set data.val="$WORK/val.txt"
grep -q "data.val = $WORK/val.txt: no such file" "$WORK/err" || fail "data.val: '$(cat "$WORK/err")'"

# 3c. ckpt-convert jobs: meshckpt's own parsing and reading, before the job is written
mt_mpirun 1 "$MT_BIN/meshtrain" "${TINY[@]}" --set parallel.dp=1 --set output.dir="$WORK/ckrun" > "$WORK/ckrun.log" 2>&1 ||
  { cat "$WORK/ckrun.log"; fail "the run that makes a checkpoint"; }
C=(render ckpt-convert --system local --nodes 1 --bin "$MT_BIN")
refused "convert: unknown subcommand" "${C[@]}" --run-dir "$WORK/conv" --args "consolidate $WORK/ckrun/checkpoints out.h5"
grep -q "^meshslurm: error: job not written: meshckpt: error: unknown command 'consolidate'" "$WORK/err" || fail "$(cat "$WORK/err")"
[ ! -e "$WORK/conv" ] || fail "a refused ckpt-convert job left $WORK/conv behind"
refused "convert: no checkpoint" "${C[@]}" --stdout --args "convert $WORK/nockpt $WORK/converted"
grep -q "meshckpt: error: $WORK/nockpt: no such checkpoint" "$WORK/err" || fail "$(cat "$WORK/err")"
refused "convert: bad option" "${C[@]}" --stdout --args "convert $WORK/ckrun/checkpoints $WORK/converted --dtype fp8"
grep -q "meshckpt: error: --dtype: 'fp8' is not fp32 or bf16" "$WORK/err" || fail "$(cat "$WORK/err")"
refused "convert: target that does not fit" "${C[@]}" --stdout --args "convert $WORK/ckrun/checkpoints $WORK/converted --target tp=3,pp=1"
grep -q "meshckpt: error: --target tp=3,pp=1 does not fit the model" "$WORK/err" || fail "$(cat "$WORK/err")"
refused "convert: no --args" "${C[@]}" --stdout
$GEN "${C[@]}" --run-dir "$WORK/conv" --args "convert $WORK/ckrun/checkpoints $WORK/converted --target tp=2,pp=1" > /dev/null ||
  fail "a valid ckpt-convert job was refused"
grep -q "meshckpt\" convert $WORK/ckrun/checkpoints $WORK/converted --target tp=2,pp=1$" "$WORK/conv/job.sh" || fail "convert job body"
[ ! -e "$WORK/converted" ] || fail "the check wrote the conversion's output"

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
data.train = $corpus
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
# campaign --set (after the sweep's [set]) fixes it; the summary says the QoS
$GEN campaign "$WORK/batch.ini" --bin "$MT_BIN" --out "$WORK/camp-set" --dry-run --set train.global_batch=8 \
  > "$WORK/set.out" || fail "campaign --set train.global_batch=8 refused"
grep -q "^QoS: none (the profile has no QoS table" "$WORK/set.out" || fail "campaign: no QoS line: $(cat "$WORK/set.out")"
$GEN campaign "$WORK/batch.ini" --bin "$MT_BIN" --out "$WORK/camp-set" --set train.global_batch=8 \
  --set train.steps=2 > /dev/null || fail "campaign --set"
# after the sweep's [set] and its steps = 4: the last of each key, which meshtrain keeps
sed -n 's/^  --set \(train.global_batch\|train.steps\)=/\1=/p' "$WORK/camp-set/points/n2-r4-dp4-tp1-pp1-cp1-rep0/job.sh" |
  tr '\n' ' ' | grep -q "^train.global_batch=4 train.steps=4 train.global_batch=8 train.steps=2 $" ||
  fail "campaign --set does not come last: $(grep -- '--set train' "$WORK/camp-set/points/n2-r4-dp4-tp1-pp1-cp1-rep0/job.sh")"
refused "campaign --set of a generator key" campaign "$WORK/batch.ini" --bin "$MT_BIN" --dry-run --set parallel.dp=2
grep -q "set by the generator" "$WORK/err" || fail "$(cat "$WORK/err")"
# LEONARDO: QoS per point said, and pinned by the sweep's qos key
cat > "$WORK/leo.ini" <<INI
[campaign]
name = qos-test
system = leonardo-booster
nodes = 1, 4, 128
time = 00:20:00
[set]
model.preset = tiny
train.global_batch = 1024
train.micro_batch = 1
data.train = $corpus
INI
NODEV=(--profile-set device= --profile-set precision=)
WORK="$WORK" $GEN campaign "$WORK/leo.ini" --account A --bin "$MT_BIN" --dry-run --out "$WORK/leo" "${NODEV[@]}" > "$WORK/leo.out" ||
  { cat "$WORK/leo.out"; fail "LEONARDO campaign"; }
grep -Fq "QoS: 3 of them, chosen per point by size and walltime from the profile's table: boost_qos_dbg for 1 node; normal for 4 nodes; boost_qos_bprod for 128 nodes." "$WORK/leo.out" ||
  fail "QoS line: $(grep QoS "$WORK/leo.out")"
sed -i 's/^time = 00:20:00$/time = 00:20:00\nqos = boost_qos_bprod/' "$WORK/leo.ini"
WORK="$WORK" refused "a pinned QoS that the 1-node point cannot use" campaign "$WORK/leo.ini" --account A --bin "$MT_BIN" --dry-run --out "$WORK/leo" "${NODEV[@]}"
grep -q "QoS boost_qos_bprod allows 65-256 nodes" "$WORK/err" || fail "$(cat "$WORK/err")"
sed -i 's/^nodes = 1, 4, 128$/nodes = 128, 256/' "$WORK/leo.ini"
WORK="$WORK" $GEN campaign "$WORK/leo.ini" --account A --bin "$MT_BIN" --dry-run --out "$WORK/leo" "${NODEV[@]}" > "$WORK/leo.out" ||
  fail "pinned QoS campaign"
grep -q "^QoS: boost_qos_bprod for every point (qos = boost_qos_bprod in the sweep)$" "$WORK/leo.out" ||
  fail "pinned QoS line: $(grep QoS "$WORK/leo.out")"

# 5. the good configuration is written; --no-check writes even the bad one;
#    no meshtrain to check with is an error that says how to go on
$GEN render train --system local --nodes 2 --bin "$MT_BIN" --run-dir "$WORK/good" "${TINY[@]}" > /dev/null ||
  fail "a valid job was refused"
[ -x "$WORK/good/job.sh" ] || fail "the valid job was not written"
$GEN render train --system local --nodes 1 --bin "$MT_BIN" --run-dir "$WORK/unchecked" --no-check \
  "${TINY[@]}" --set train.stpes=5 > /dev/null || fail "--no-check still refused"
refused "no binary" render train --system local --nodes 1 --bin "$WORK/nobin" --stdout "${TINY[@]}"
grep -q "cannot check it: no $WORK/nobin/meshtrain (build first.*--no-check skips the checks)" \
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
