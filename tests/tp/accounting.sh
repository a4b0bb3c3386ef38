# accounting.sh NAME L C NH T V [meshtrain args selecting that shape...]
# Exact communication and memory accounting for one model shape: on tp = 2
# and 4, with and without sp, with dp = 2 (ZeRO-1 and not) and gradient
# accumulation, the bytes each rank counts per step on the tp group and on
# the dp group equal the analytical formula of check_accounting.py, and the
# parameter bytes each rank allocates equal the registry's prediction and the
# formula (sharded tensors / tp + replicated tensors), exactly.
MT_SUFFIX=$1; L=$2; C=$3; NH=$4; T=$5; V=$6; shift 6
MT_NAME=tp_accounting
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
common=(--set train.steps=2 --set train.global_batch=8 --set data.train="$corpus"
        --set train.eval_every=0 "$@")
runs=()
run() { # NAME NP DP TP SP MICRO_BATCH ZERO
  local name=$1 np=$2 dp=$3 tp=$4 sp=$5 mb=$6 zero=$7
  mt_train "$name" "$np" "${common[@]}" --set parallel.dp="$dp" --set parallel.tp="$tp" \
    --set parallel.sp="$sp" --set train.micro_batch="$mb" --set parallel.zero="$zero" \
    --set output.dir="$WORK/$name"
  grep -q "L=$L C=$C H=$NH T=$T V=$V)" "$WORK/$name.log" || fail "run $name: not the shape L=$L C=$C H=$NH T=$T V=$V"
  runs+=("$WORK/$name:$dp:$tp:$sp:$mb:$zero")
}
run tp1 1 1 1 false 8 0
run tp2 2 1 2 false 4 0
run tp2_sp 2 1 2 true 8 0
run tp4 4 1 4 false 8 0
run tp4_sp 4 1 4 true 4 0
run dp2_tp2_sp_zero 4 2 2 true 2 1
run dp2_tp2 4 2 2 false 4 0
python3 "$(dirname "$0")/check_accounting.py" "$L" "$C" "$NH" "$T" "$V" 8 "${runs[@]}"
