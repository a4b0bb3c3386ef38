# meshplan_fail.sh NAME REGEX CASE: bad input to meshplan gives exactly one
# error line matching REGEX and exit 2 (no hang).
#   profile-missing-key: a cost profile without inter_us
#   no-fit: gpt2-124m on 1 node of a profile with too little memory
#   only-no-fit: --only of gpt2-124m on one device of that profile
#   bad-dtype: --dtype with a size no dtype has
#   bad-collectives: a profile's collectives = neither hierarchical nor flat
#   bad-stack: --stack with a name no preset has
#   efficiency-zero, efficiency-high, efficiency-word: --compute-efficiency
#     0, 1.6 (above the accepted 1.5) and a word, beside a --stack
#   profile-twice: a profile's [cost] key given twice (the last would win)
#   peak-low: a peak_gflops below the profile's own gemm curve
#   bw-absurd: a link of 1e-300 GB/s
MT_SUFFIX=$1; REGEX=$2; CASE=$3
source "$(dirname "$0")/../scripts/common.sh"
prof="$WORK/profile.ini"
case $CASE in
  profile-missing-key) grep -v '^inter_us' "$MT_SRC/tests/plan/cost-test.ini" > "$prof"
    args=(--set model.preset=tiny --set train.global_batch=16 --hw "$prof" --nodes 1) ;;
  no-fit) cp "$MT_SRC/tests/plan/cost-test.ini" "$prof"
    args=(--set model.preset=gpt2-124m --set train.global_batch=16 --hw "$prof" --nodes 1) ;;
  only-no-fit) args=(--set model.preset=gpt2-124m --set train.global_batch=16
                     --hw "$MT_SRC/tests/plan/cost-test.ini" --only) ;;
  bad-dtype) args=(--set model.preset=tiny --hw "$MT_SRC/tests/plan/cost-test.ini" --nodes 1
                  --dtype weights=3) ;;
  bad-stack) args=(--set model.preset=tiny --hw "$MT_SRC/tests/plan/cost-test.ini" --only
                  --stack megatron) ;;
  efficiency-zero|efficiency-high|efficiency-word)
    case $CASE in efficiency-zero) x=0 ;; efficiency-high) x=1.6 ;; *) x=fast ;; esac
    args=(--set model.preset=tiny --hw "$MT_SRC/tests/plan/cost-test.ini" --only
          --stack megatron-2021 --compute-efficiency "$x") ;;
  bad-collectives) { cat "$MT_SRC/tests/plan/cost-test.ini"; echo "collectives = tree"; } > "$prof"
    args=(--set model.preset=tiny --set train.global_batch=16 --hw "$prof" --nodes 1) ;;
  profile-twice|peak-low|bw-absurd)
    case $CASE in
      profile-twice) edit='s/^intra_us = 20/intra_us = 20\nintra_us = 2/' ;;
      peak-low) edit='s/^peak_gflops = .*/peak_gflops = 5/' ;;
      bw-absurd) edit='s/^intra_gbs = .*/intra_gbs = 1e-300/' ;;
    esac
    sed "$edit" "$MT_SRC/tests/plan/cost-test.ini" > "$prof"
    args=(--set model.preset=tiny --set train.global_batch=16 --hw "$prof" --nodes 1) ;;
  *) fail "unknown case $CASE" ;;
esac
set +e
mt_guard "$MT_BIN/meshplan" "${args[@]}" > "$WORK/out" 2> "$WORK/err"
rc=$?
set -e
cat "$WORK/err"
[ $rc -eq 2 ] || fail "exit code $rc, expected 2"
[ "$(grep -c '^meshplan: error:' "$WORK/err")" -eq 1 ] || fail "expected one error line"
grep '^meshplan: error:' "$WORK/err" | grep -Eq -- "$REGEX" || fail "error line does not match /$REGEX/"
echo PASS
