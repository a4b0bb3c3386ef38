# comm's nine 16-bit calls on device buffers over the emulated NCCL (bf16
# sums in fp32, each partial sum rounded to bf16) against the host path:
# all over NCCL, none staged, the host's bytes and bits (nccl16.c says
# why bits). 2 and 4 ranks: equal and uneven parts, the layouts along a dim.
source "$(dirname "$0")/../common_gpu.sh"
needs_gpu
mt_test_program gpu_emu_nccl16 2 4
echo PASS
