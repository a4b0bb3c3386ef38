# comm's direct path for device buffers (NCCL's place) with a stand-in
# backend: dispatch, results, counters, requests, point-to-point channels,
# and the padded / rank-major layouts nccl.c uses. 2 and 4 ranks.
source "$(dirname "$0")/../scripts/common.sh"
mt_test_program comm_device_direct 2 4
echo PASS
