# meshckpt convert (issue 14): shared -> per-writer -> shared and fp32 ->
# bf16 -> fp32 round trips (meshckpt diff: bitwise, and within bf16
# rounding), the optimizer state kept fp32, parameters-only checkpoints
# (train.resume refuses them, train.init_from starts from them), a target
# layout (one shard per target rank) that a run of that layout resumes from,
# a bf16 checkpoint that resumes, a convert killed halfway (no complete-looking
# output; the next convert into the same place commits), and bad options.
source "$(dirname "$0")/common_ckpt.sh"
M="$MT_BIN/meshckpt"
S=(--set train.steps=8 --set parallel.dp=2 --set parallel.zero=1 --set train.micro_batch=2)
train ref 1 --set train.steps=8 --set train.micro_batch=4 --set output.dir="$WORK/ref"
train src 2 "${S[@]}" --set train.stop_after=4 --set output.dir="$WORK/src"
SRC="$WORK/src/checkpoints/step_4"
# convert OUTNAME NP ARGS...: meshckpt convert SRC-or-given into $WORK/OUTNAME, which verifies
conv() {
  local out=$1 np=$2; shift 2
  mt_mpirun "$np" "$M" convert "$@" "$WORK/$out" > "$WORK/$out.log" 2>&1 \
    || { cat "$WORK/$out.log"; fail "convert to $out failed"; }
  mt_mpirun 2 "$M" verify "$WORK/$out/step_4" --deep > "$WORK/$out.verify" \
    || { cat "$WORK/$out.verify"; fail "$out does not verify"; }
}
same() { "$M" diff "$1" "$2" "${@:3}" > "$WORK/diff.log" || { cat "$WORK/diff.log"; fail "$1 and $2 differ"; }; }

# layouts: bitwise round trip through the other mode (1, 2 and 3 ranks)
conv pw 2 "$SRC" --mode per-writer
conv sh 3 "$WORK/pw/step_4" --mode shared
same "$SRC" "$WORK/pw/step_4"; same "$SRC" "$WORK/sh/step_4"
grep -q "^diff: equal (every tensor bitwise" "$WORK/diff.log" || fail "shared round trip not bitwise"
# fp32 -> bf16 -> fp32: the parameters within bf16 rounding, the optimizer state bitwise
conv bf 2 "$SRC" --dtype bf16 --mode per-writer
h5dump -H -d /model/wte.weight "$WORK/bf/step_4/shard-00000.h5" | grep -q "16-bit" \
  || fail "the bf16 parameters are not stored in 16 bits"
h5dump -H -d /optim/exp_avg/wte.weight "$WORK/bf/step_4/shard-00000.h5" | grep -q "IEEE_F32LE" \
  || fail "the optimizer state did not stay fp32"
conv back 1 "$WORK/bf/step_4" --dtype fp32 --mode shared
set +e; "$M" diff "$SRC" "$WORK/back/step_4" > "$WORK/diff_exact.log"; rc=$?; set -e
[ $rc -eq 1 ] || fail "fp32 -> bf16 -> fp32 is bitwise equal: no rounding happened"
! grep -q "/optim/" "$WORK/diff_exact.log" || { cat "$WORK/diff_exact.log"; fail "the optimizer state changed"; }
same "$SRC" "$WORK/back/step_4" --rtol 0.00390625
grep -q "^diff: equal within rtol" "$WORK/diff.log" || fail "bf16 round trip not within 2^-8"
conv bf2 2 "$WORK/back/step_4" --dtype bf16 --mode shared
same "$WORK/bf/step_4" "$WORK/bf2/step_4"   # bf16 -> fp32 -> bf16 is exact
# a bf16 checkpoint resumes (the parameters widened) and trains on
train bf_resumed 1 --set train.steps=6 --set train.micro_batch=4 --set train.resume="$WORK/bf/step_4" \
  --set output.dir="$WORK/bf_resumed"
python3 "$CMP" "$WORK/ref" "$WORK/bf_resumed" --subset --rtol 1e-2
# parameters only: half the boxes, refused by train.resume, taken by train.init_from
conv params 2 "$SRC" --params-only --mode per-writer
grep -q "parameters only" "$WORK/params.verify" || fail "verify does not say parameters only"
set +e
mt_guard "$MT_MPIEXEC" --oversubscribe -n 2 "$MT_BIN/meshtrain" "${base[@]}" "${S[@]}" \
  --set train.resume="$WORK/params/step_4" --set output.dir="$WORK/out_params" > /dev/null 2> "$WORK/params.err"
rc=$?; set -e
[ $rc -eq 2 ] && [ "$(grep -c '^meshtrain: error:.*parameters only.*train.init_from' "$WORK/params.err")" -eq 1 ] \
  || { cat "$WORK/params.err"; fail "train.resume of a parameters-only checkpoint: rc $rc"; }
train init 2 "${S[@]}" --set train.steps=2 --set train.init_from="$WORK/params" --set output.dir="$WORK/init"
grep -q "parameters from .*params/step_4 (step 4" "$WORK/init.log" || fail "init_from did not load"
# a target layout: tp 2 x pp 2, one shard file per target rank; a run of that
# layout resumes from it and continues the reference curve
conv tgt 2 "$SRC" --target tp=2,pp=2 --mode per-writer
[ "$(ls "$WORK/tgt/step_4" | grep -c '^shard-')" -eq 4 ] || fail "want 4 shard files for tp=2,pp=2"
same "$SRC" "$WORK/tgt/step_4"
conv tgt_sh 2 "$SRC" --target tp=2,pp=2 --mode shared
same "$SRC" "$WORK/tgt_sh/step_4"
train tgt_resumed 4 --set train.steps=8 --set parallel.tp=2 --set parallel.pp=2 --set train.micro_batch=4 \
  --set train.resume="$WORK/tgt/step_4" --set output.dir="$WORK/tgt_resumed"
python3 "$CMP" "$WORK/ref" "$WORK/tgt_resumed" --subset --rtol 1e-5
# tp=N or pp=M alone (issue 27): the other as the checkpoint is laid out; the
# input named by its `latest` file; inspect says the layout it was laid out for
conv tgt_tp 1 "$WORK/src/checkpoints/latest" --target tp=2 --mode per-writer
[ "$(ls "$WORK/tgt_tp/step_4" | grep -c '^shard-')" -eq 2 ] || fail "--target tp=2: want 2 shards (pp=1 as written)"
"$M" inspect "$WORK/tgt_tp/latest" > "$WORK/tgt_tp.inspect" || fail "inspect latest"
grep -q "laid out for    tp=2 pp=1" "$WORK/tgt_tp.inspect" || { cat "$WORK/tgt_tp.inspect"; fail "inspect: no target layout"; }
conv tgt_pp 1 "$WORK/tgt_tp/latest" --target pp=2 --mode per-writer
[ "$(ls "$WORK/tgt_pp/step_4" | grep -c '^shard-')" -eq 4 ] || fail "--target pp=2 of a tp=2 layout: want 4 shards"
"$M" inspect "$WORK/tgt_pp" | grep -q "laid out for    tp=2 pp=2" || fail "inspect: pp=2 alone did not keep tp=2"
same "$SRC" "$WORK/tgt_pp/latest"

# killed halfway (rank 0 kills itself in the middle of its boxes): nothing
# complete-looking is left; the next convert into the same place commits
for mode in shared per-writer; do
  set +e
  mt_guard "$MT_MPIEXEC" --oversubscribe -n 2 "$M" convert "$SRC" "$WORK/killed_$mode" --mode "$mode" \
    --test-crash write > "$WORK/killed_$mode.log" 2>&1
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$WORK/killed_$mode.log"; fail "killed convert ($mode): rc $rc"; }
  grep -q "killing rank 0 at phase 'write'" "$WORK/killed_$mode.log" || fail "the crash point was not reached ($mode)"
  [ ! -e "$WORK/killed_$mode/step_4" ] && [ ! -e "$WORK/killed_$mode/latest" ] \
    || fail "a killed convert left a complete-looking step_4 ($mode)"
  ls -d "$WORK/killed_$mode"/step_4.tmp-* > /dev/null || fail "no temporary directory left to inspect ($mode)"
  set +e; "$M" verify "$WORK/killed_$mode" > "$WORK/killed_verify.log" 2>&1; rc=$?; set -e
  [ $rc -eq 2 ] && grep -q "no complete checkpoint" "$WORK/killed_verify.log" \
    || { cat "$WORK/killed_verify.log"; fail "verify of a killed convert's output: rc $rc"; }
  conv "killed_$mode" 2 "$SRC" --mode "$mode"
  ! ls -d "$WORK/killed_$mode"/step_4.tmp-* 2> /dev/null || fail "the leftover was not cleaned ($mode)"
done

# bad options: one line, exit 2, nothing written
bad() {
  local re=$1; shift
  set +e; mt_mpirun 2 "$M" convert "$SRC" "$WORK/bad" "$@" > "$WORK/bad.log" 2>&1; local rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c "error:" "$WORK/bad.log")" -eq 1 ] && grep -Eq -- "$re" "$WORK/bad.log" \
    || { cat "$WORK/bad.log"; fail "convert $*: rc $rc, want one line matching /$re/"; }
  [ ! -e "$WORK/bad" ] || fail "convert $* wrote something"
}
bad "--dtype: 'fp16' is not fp32 or bf16" --dtype fp16
bad "--target: 'tp=2,tp=3' is not tp=N, pp=M or tp=N,pp=M" --target tp=2,tp=3
bad "--target tp=3,pp=1 does not fit the model" --target tp=3,pp=1
bad "--mode: 'both' is not shared or per-writer" --mode both
bad "--buffer-mb: '0' is not a number >= 1" --buffer-mb 0
echo PASS
