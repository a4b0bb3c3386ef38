# Shared by the GPU tests (label gpu). Without a visible GPU (or without
# CUDA in this build) a test prints "SKIP: <reason>" and exits 77: CTest
# counts it as skipped and tests/run.sh lists the reason.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh" || exit 1
CMP="$MT_SRC/tests/scripts/compare_runs.py"
# the gradients of step 1 against a reference run (runs made with
# MT_TEST_GRAD_SUMS=RUN.grads): grad_check REF RUN fp32|bf16 [WHAT]
grad_check() {
  python3 "$MT_SRC/tests/scripts/grad_check.py" "$1" "$2" --dtype "$3" --what "${4:-$(basename "$2")}" ||
    fail "${4:-$(basename "$2")}: the gradients of step 1"
}

needs_gpu() {
  local info n why
  info=$("$MT_BIN/meshbench" devices 2>&1) || true
  n=$(awk '/^gpus / {print $2}' <<< "$info")
  if [ "${n:-0}" -lt 1 ]; then
    why=$(sed -n 's/^reason //p' <<< "$info")
    echo "SKIP: no GPU visible: ${why:-meshbench devices found none}"
    exit 77
  fi
  sed -n 's/^gpu 0 /GPU 0: /p' <<< "$info"
}

# train NAME NP ARGS...: meshtrain on NP ranks, log in $WORK/NAME.log
train() {
  local name=$1 np=$2; shift 2
  mt_mpirun "$np" "$MT_BIN/meshtrain" "$@" > "$WORK/$name.log" 2>&1 ||
    { tail -30 "$WORK/$name.log"; fail "run $name failed"; }
}
