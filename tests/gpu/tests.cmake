# The GPU tests (issue: GPU backend). Label gpu; each exits 77 with the
# reason where no GPU is visible (CI), so CTest and tests/run.sh list them
# as skipped. tests/gpu/check.sh builds with CUDA and runs them, then the
# benchmark, on a GPU machine.
mt_test_program(gpu_ops ${CMAKE_CURRENT_LIST_DIR}/gpu_ops.c)
mt_script_test(ops gpu ops.sh gpu_ops)
mt_script_tests(gpu
  train_tiny train_tiny.sh
  bf16       bf16.sh
  layouts    layouts.sh
  ckpt       ckpt.sh
  memory     memory.sh
  no_fit     no_fit.sh
  muon       muon.sh
  ladder     ladder.sh
  slices     slices.sh)
mt_test_program(gpu_moe_ops ${CMAKE_CURRENT_LIST_DIR}/gpu_moe_ops.c)
mt_script_test(moe_ops gpu ops.sh gpu_moe_ops)
mt_script_test(train_moe gpu train_moe.sh)
# the ops at the edges of their shapes (C 1..33, every head size, V = 1)
mt_test_program(gpu_edges ${CMAKE_CURRENT_LIST_DIR}/gpu_edges.c)
mt_script_test(edges gpu ops.sh gpu_edges)
# the block attention and cross-entropy on bf16 storage against the CPU's
mt_test_program(gpu_attn_bf16 ${CMAKE_CURRENT_LIST_DIR}/gpu_attn_bf16.c)
mt_script_test(attn_bf16 gpu ops.sh gpu_attn_bf16)
# the CPU references of bf16 attention as the CUDA kernels compute it (P
# and dS kept in fp32: MT_BF16_ATTN=widened)
set_property(TEST gpu.attn_bf16 gpu.bf16 APPEND PROPERTY ENVIRONMENT MT_BF16_ATTN=widened)
# a target of -1 (ignored: loss 0, dlogits 0) in the cross-entropy ops, fp32 and bf16
mt_test_program(gpu_xent_ignore ${CMAKE_CURRENT_LIST_DIR}/gpu_xent_ignore.c)
mt_script_test(xent_ignore gpu ops.sh gpu_xent_ignore fp32)
# every op on bf16 storage against the CPU's (the same at either precision:
# a run started at fp32 and one at bf16 with 1 MiB of scratch)
mt_test_program(gpu_ops_bf16 ${CMAKE_CURRENT_LIST_DIR}/gpu_ops_bf16.c)
mt_script_test(ops_bf16 gpu ops.sh gpu_ops_bf16 fp32 bf16_small_scratch)
# the fused ops (residual + norm, AdamW over ranges) against the unfused ones
mt_test_program(gpu_fused ${CMAKE_CURRENT_LIST_DIR}/gpu_fused.c)
mt_script_test(fused gpu ops.sh gpu_fused fp32 bf16)
# the general GEMM with every leading dimension and batch stride padded,
# whole and in pieces, against the test's own product
mt_test_program(gpu_gemm_ld ${CMAKE_CURRENT_LIST_DIR}/gpu_gemm_ld.c)
mt_script_test(gemm_ld gpu ops.sh gpu_gemm_ld fp32)

# bad input about devices, on any machine (badinput: also under ASan)
set(T --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(fp16_refused badinput ../scripts/expect_fail.sh fp16_refused 2
  "train.precision = fp16: fp16 needs dynamic loss scaling" ${T} --set train.precision=fp16)
# bf16 gradients are reduced in bf16, and need the bf16 precision's ops
mt_script_test(grad_dtype_bf16_fp32_reduce badinput ../scripts/expect_fail.sh grad_dtype_bf16_fp32_reduce 2
  "train.grad_dtype = bf16 with parallel.grad_reduce_dtype = fp32" ${T} --set train.precision=bf16 --set train.grad_dtype=bf16)
mt_script_test(grad_dtype_bf16_fp32 badinput ../scripts/expect_fail.sh grad_dtype_bf16_fp32 2
  "train.grad_dtype = bf16 needs train.precision = bf16" ${T} --set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16)
# the bf16 gradient reduction narrows fp32 gradients with the bf16 ops: fp32 runs refuse it
mt_script_test(grad_reduce_bf16_fp32 badinput ../scripts/expect_fail.sh grad_reduce_bf16_fp32 2
  "parallel.grad_reduce_dtype = bf16 needs train.precision = bf16" ${T} --set parallel.dp=2 --set parallel.grad_reduce_dtype=bf16)
mt_script_test(grad_dtype_unknown badinput ../scripts/expect_fail.sh grad_dtype_unknown 2
  "train.grad_dtype: 'fp8' is not one of fp32.bf16" ${T} --set train.grad_dtype=fp8)
mt_script_test(bad_device badinput ../scripts/expect_fail.sh bad_device 1
  "train.device: 'gpu' is not one of cpu.cuda.auto" ${T} --set train.device=gpu)
mt_script_test(cuda_without_gpu badinput no_gpu.sh)

# the same GPU tests on the host execution model of CUDA (-DMT_CUDA_EMU=ON)
include(${CMAKE_CURRENT_LIST_DIR}/emu/tests.cmake)
