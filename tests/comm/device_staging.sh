# comm with device buffers (a stand-in device backend): every collective and
# point-to-point call gives the host result, staged through the backend's
# copy functions, with the same bytes counted (and the 16-bit all-to-all
# against the f32 one on host buffers). 2 and 4 ranks.
source "$(dirname "$0")/../scripts/common.sh"
mt_test_program comm_device_staging 2 4
echo PASS
