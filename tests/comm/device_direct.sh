# comm's direct path for device buffers (NCCL's place) with a stand-in
# backend: dispatch, results, counters, requests, point-to-point channels,
# and the padded / rank-major layouts nccl.c uses. 2 and 4 ranks.
source "$(dirname "$0")/../scripts/common.sh"
for np in 2 4; do
  mt_mpirun "$np" "$MT_TESTBIN/comm_device_direct" > "$WORK/np$np.log" 2>&1 \
    || { cat "$WORK/np$np.log"; fail "direct device path on $np ranks"; }
  cat "$WORK/np$np.log"
done
echo PASS
