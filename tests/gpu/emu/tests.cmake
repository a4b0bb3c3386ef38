# gpu-emu: the CUDA backend and NCCL run on the host execution model
# (configured with -DMT_CUDA_EMU=ON; tests/run.sh builds build-emu/ and runs
# label gpu-emu there, and the ASan build runs the "sanitize" one).
if(NOT MT_CUDA_EMU)
  return()
endif()

# what the gpu-emu tests run (tests/run.sh builds this target only)
add_custom_target(gpu_emu_all)
add_dependencies(gpu_emu_all meshtrain meshdata meshbench gpu_ops gpu_moe_ops gpu_edges
                 gpu_ops_bf16 gpu_attn_bf16 gpu_xent_ignore gpu_gemm_ld gpu_fused gpu_emu_selftest
                 gpu_emu_nccl16)

# comm's 16-bit calls over NCCL (bf16 sums rounded as NCCL's) against the
# host path, on 2 and 4 ranks
mt_test_program(gpu_emu_nccl16 ${CMAKE_CURRENT_LIST_DIR}/nccl16.c)

# the emulator's own defects-found test (a .cu program of planted bugs)
mt_emu_program(gpu_emu_selftest ${CMAKE_CURRENT_LIST_DIR}/selftest.cu)
set_target_properties(gpu_emu_selftest PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_link_libraries(gpu_emu_selftest PRIVATE MPI::MPI_C)

# mt_emu_test(NAME LABELS SCRIPT ARGS...): SCRIPT relative to tests/gpu,
# with emulated GPUs (four a node: a GPU per rank of the layouts) and a
# short watchdog, so that a hang fails with its report, not at the timeout
function(mt_emu_test name labels script)
  add_test(NAME gpu-emu.${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../${script} ${ARGN})
  set_tests_properties(gpu-emu.${name} PROPERTIES LABELS "${labels}" TIMEOUT 600
    ENVIRONMENT "${MT_TEST_ENV};MT_EMU_GPUS=4;MT_EMU_WATCHDOG_S=60;MT_NAME=emu-${name}"
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} SKIP_RETURN_CODE 77)
endfunction()

# bad input with a GPU present: one line, every rank exits 2, nothing written
# mt_emu_bad(NAME REGEX ENV ARGS...): ENV one VAR=VALUE (or "")
function(mt_emu_bad name regex env)
  add_test(NAME gpu-emu.bad_${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/scripts/expect_fail.sh
           emu_bad_${name} 2 "${regex}" --set model.preset=tiny --set data.train=@CORPUS@
           --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=2
           --set train.device=cuda ${ARGN})
  set_tests_properties(gpu-emu.bad_${name} PROPERTIES LABELS "gpu-emu;badinput" TIMEOUT 120
    ENVIRONMENT "${MT_TEST_ENV};MT_EMU_GPUS=2;${env}" WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endfunction()
mt_emu_bad(head_size "model.n_embd / model.n_head = 520 / 2 = 260 channels per head: the CUDA attention kernels take 1 .. 256"
           "" --set model.preset=custom --set model.n_layer=1 --set model.n_embd=520
           --set model.n_head=2 --set model.seq_len=16)
mt_emu_bad(scratch_mb "MT_CUDA_SCRATCH_MB = '12x': a whole number of MiB" MT_CUDA_SCRATCH_MB=12x)
mt_emu_bad(bf16_gemm "MT_CUDA_BF16_GEMM = 'quick': not one of convert.fast" MT_CUDA_BF16_GEMM=quick
           --set train.precision=bf16)
mt_emu_bad(op_times "MT_CUDA_OP_TIMES = 'yes': not one of 0.1" MT_CUDA_OP_TIMES=yes)
mt_emu_bad(host_wait "MT_COMM_HOST_WAIT = '2': not one of 0.1" MT_COMM_HOST_WAIT=2)
# NCCL's communicators failing to come up: one line, no hang; what was made
# is freed (LeakSanitizer checks it in the ASan build)
mt_emu_bad(nccl_init "NCCL: ncclGroupEnd.* failed: .*MT_EMU_NCCL_FAIL=init" MT_EMU_NCCL_FAIL=init)

if(MT_SANITIZE)
  # one AddressSanitizer pass of every op (fibers annotated for ASan); quick:
  # the largest attention case on 700 rows, not 3500 (it took 94 of the
  # pass's 117 s on an idle core, and past the 300-s hang guard beside two
  # busy loops)
  mt_emu_test(ops_asan "gpu-emu;sanitize" emu/run_one.sh gpu_ops fp32 quick)
  return()
endif()
mt_emu_test(selftest gpu-emu emu/selftest.sh)
# comm's 16-bit calls over the emulated NCCL (a few seconds)
mt_emu_test(nccl16 gpu-emu emu/nccl16.sh)
# every op against the CPU backend: fp32, bf16, bf16 in pieces, bf16-fast
mt_emu_test(ops gpu-emu ops.sh gpu_ops)
mt_emu_test(moe_ops gpu-emu ops.sh gpu_moe_ops)
mt_emu_test(edges gpu-emu ops.sh gpu_edges)
mt_emu_test(attn_bf16 gpu-emu ops.sh gpu_attn_bf16)
mt_emu_test(xent_ignore gpu-emu ops.sh gpu_xent_ignore fp32)
mt_emu_test(ops_bf16 gpu-emu ops.sh gpu_ops_bf16 fp32 bf16_small_scratch)
mt_emu_test(gemm_ld gpu-emu ops.sh gpu_gemm_ld fp32)
mt_emu_test(fused gpu-emu ops.sh gpu_fused fp32 bf16)
# the same bytes whatever the order a block's threads resume in
mt_emu_test(orders gpu-emu emu/orders.sh)
# meshtrain on emulated GPUs
mt_emu_test(train_tiny gpu-emu train_tiny.sh)
mt_emu_test(bf16 gpu-emu emu/bf16.sh)
# the CPU's bf16 attention as the CUDA kernels compute it (P and dS kept in
# fp32: MT_BF16_ATTN=widened), for the references these two hold to bf16's
# tolerance of the same arithmetic
set_property(TEST gpu-emu.bf16 gpu-emu.attn_bf16 APPEND PROPERTY ENVIRONMENT MT_BF16_ATTN=widened)
mt_emu_test(muon gpu-emu muon.sh)
mt_emu_test(ladder gpu-emu ladder.sh)
mt_emu_test(slices gpu-emu slices.sh)
# the plan = the run's counters on the emulated GPU under bf16 (18 layouts)
mt_emu_test(memory_bf16 gpu-emu memory.sh tiny_bf16)
mt_emu_test(layouts gpu-emu emu/layouts.sh)

# the reference losses on the emulated GPU (tests/reference/losses.txt's
# [cuda] section, bitwise): one rank in fp32, and under bf16 dp 2 with bf16
# gradients at ZeRO-3, tp 2 + sp and MoE ep 2; pp 2 under zb-h1 in fp32
# (layouts.sh holds dp, cp and the rest to the CPU's losses)
mt_emu_test(reference_losses gpu-emu ../reference/losses.sh
            "^(fp32.r1|bf16.dp2z3g16|bf16.tp2sp|bf16.ep2|fp32.pp2zbh1)$")
set_property(TEST gpu-emu.reference_losses APPEND PROPERTY ENVIRONMENT MT_REF_DEVICE=cuda
             MT_BUILD_ARCH=${MT_EFFECTIVE_ARCH})
