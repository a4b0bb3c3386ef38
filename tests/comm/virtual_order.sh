# the virtual backend prices a group's non-blocking collectives in the
# order they were issued, whatever the order of their waits (2 ranks)
source "$(dirname "$0")/../scripts/common.sh"
mt_test_program comm_virtual_order 2
echo PASS
