# Script tests (included from tests/CMakeLists.txt).
set(S ${CMAKE_CURRENT_SOURCE_DIR})

# the loss comparison every equivalence test relies on: numbers, NaN and null fail
mt_script_test(compare_runs unit compare_runs_check.sh)

# No MPI return code dropped in lib/ or apps/ but those on the allow-list
# (mpi_unchecked_allow.txt, which may only shrink); and the scan itself on
# planted drops (multi-line calls, macros, if bodies, (void) casts)
add_test(NAME unit.mpi_checked COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/mpi_checked.py --root ${CMAKE_SOURCE_DIR})
add_test(NAME unit.mpi_checked_planted COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/mpi_checked.py --self-test)
set_tests_properties(unit.mpi_checked unit.mpi_checked_planted PROPERTIES LABELS unit TIMEOUT 60)
mt_script_tests(mpi
  dp_equivalence dp_equivalence.sh
  determinism    determinism.sh
  loss_falls     loss_falls.sh
  bf16_train     bf16_train.sh
  bf16_layouts   bf16_layouts.sh
  bf16_grads     bf16_grads.sh
  mfu_peak       mfu_peak.sh
  bench_gemm_bf16 bench_gemm_bf16.sh)

# Bad input: name, ranks, regex the one error line must match, arguments.
set(T --set model.preset=tiny --set parallel.dp=2 --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(unknown_key_file badinput expect_fail.sh unknown_key_file 2
  "bad_key.ini:6: unknown key 'train.stepz'" ${S}/data/bad_key.ini)
mt_script_test(unknown_key_set badinput expect_fail.sh unknown_key_set 2
  "unknown key 'train.stepz'" ${T} --set train.stepz=3)
mt_script_test(malformed_int badinput expect_fail.sh malformed_int 2
  "train.steps.*'12x'" ${T} --set train.steps=12x)
mt_script_test(malformed_double badinput expect_fail.sh malformed_double 2
  "train.lr.*'fast'" ${T} --set train.lr=fast)
mt_script_test(missing_config badinput expect_fail.sh missing_config 2
  "no-such.ini: cannot open" ${S}/data/no-such.ini)
mt_script_test(world_not_mesh badinput expect_fail.sh world_not_mesh 2
  "does not match the 2 MPI ranks" ${T} --set parallel.dp=4)
mt_script_test(batch_not_divisible badinput expect_fail.sh batch_not_divisible 2
  "global_batch = 7 is not divisible" ${T} --set parallel.dp=2 --set train.global_batch=7 --set train.micro_batch=1)
mt_script_test(missing_dataset badinput expect_fail.sh missing_dataset 2
  "no-such-corpus.bin: cannot open" ${T} --set data.train=${S}/data/no-such-corpus.bin)
mt_script_test(dataset_too_short badinput expect_fail.sh dataset_too_short 2
  "short.txt.*(fewer than one global batch|shorter than one sequence)" ${T} --set data.train=${S}/data/short.txt)
mt_script_test(token_beyond_vocab badinput expect_fail.sh token_beyond_vocab 2
  "token id [0-9]+ at offset [0-9]+ is >= vocab size 64" ${T} --set model.vocab_size=64)
mt_script_test(tp_not_dividing_heads badinput expect_fail.sh tp_not_dividing_heads 2
  "parallel.tp = 8 does not divide the attention heads model.n_head = 4" ${T} --set parallel.tp=8)
mt_script_test(heads_not_dividing badinput expect_fail.sh heads_not_dividing 2
  "n_head = 5 does not divide model.n_embd = 32" ${T} --set model.n_head=5 --set parallel.dp=2)
mt_script_test(impossible_memory badinput expect_fail.sh impossible_memory 2
  "needs about .* GiB per rank" ${T} --set model.preset=gpt2-124m --set train.micro_batch=4096 --set train.global_batch=8192)
mt_script_test(bad_hw_profile badinput expect_fail.sh bad_hw_profile 2
  "metrics.hw: cannot open hardware profile 'no-such-gpu'" ${T} --set metrics.hw=no-such-gpu)
mt_script_test(hw_key_twice badinput expect_fail.sh hw_key_twice 2
  "hw_key_twice.ini:8: \\[hw\\] key 'peak_gflops_fp32' given twice" ${T} --set metrics.hw=${S}/data/hw_key_twice.ini)

# A short dp=2 ZeRO-1 run with validation: run under the sanitizer build too.
mt_script_test(train_smoke sanitize train_smoke.sh)
mt_script_test(async_needs_per_writer badinput expect_fail.sh async_needs_per_writer 2
  "ckpt.async = true needs ckpt.mode = per-writer" ${T} --set ckpt.async=true)

# Odd inputs (issue 10): each refused with one line naming it, never a hang.
mt_script_test(vocab_beyond_uint16 badinput expect_fail.sh vocab_beyond_uint16 2
  "corpus.bin: format llmc holds token ids up to 65535, too few for vocab size 70000" ${T} --set data.train=@CORPUS_LLMC@ --set model.vocab_size=70000)
mt_script_test(llmc_bad_magic badinput expect_fail.sh llmc_bad_magic 2
  "damaged.bin: bad llm.c header: magic [-0-9]+, expected 20240520" ${T} --set data.train=@BAD_MAGIC@ --set data.format=llmc)
mt_script_test(llmc_bad_magic_auto badinput expect_fail.sh llmc_bad_magic_auto 2
  "damaged.bin: bad llm.c header: magic [-0-9]+, expected 20240520, but the rest of the header is llm.c's" ${T} --set data.train=@BAD_MAGIC@ --set data.format=auto)
mt_script_test(fifo_dataset badinput expect_fail.sh fifo_dataset 2
  "tokens.fifo: not a regular file \\(a named pipe\\)" ${T} --set data.train=@FIFO@)
mt_script_test(val_token_beyond_vocab badinput expect_fail.sh val_token_beyond_vocab 2
  "val_bad.txt: token id 250 at offset [0-9]+ is >= vocab size 200" ${T} --set data.train=@VAL_BAD@ --set model.vocab_size=200)
mt_script_test(ini_nul_byte badinput expect_fail.sh ini_nul_byte 2
  "nul.ini:2: data.train: value contains a NUL byte" @NUL_INI@ ${T})
# a learning rate that is 0 in fp32, where the optimizer computes
mt_script_test(lr_zero_in_fp32 badinput expect_fail.sh lr_zero_in_fp32 2
  "train.lr = 4.9[0-9]*e-324 is below fp32's smallest normal number 1.17549e-38" ${T} --set train.lr=4.9e-324)
mt_script_test(hex_for_decimal badinput expect_fail.sh hex_for_decimal 2
  "parallel.bucket_mb: '0x10' is not a decimal number" ${T} --set parallel.bucket_mb=0x10)

# An error found several calls deep carries its chain (MT_ERR_TRACE=1): the
# file:line where it was set, then every caller that passed it up
mt_script_test(err_chain badinput err_chain.sh)

# token ids above 65,535: uint32 files train a model with that vocabulary
mt_script_test(u32_vocab mpi u32_vocab.sh)

# thread placement: one warning line per node when threads exceed the CPUs of the masks
mt_script_test(thread_placement mpi thread_placement.sh)

# The memory check honours the job's limit (here Slurm's, given by the test):
# small with micro-batch 64 (1.6 GiB a rank) fits this machine's
# MemAvailable, not 2 GiB.
mt_script_test(memory_slurm_limit badinput expect_fail.sh memory_slurm_limit 2
  "2 ranks on this node need [0-9.]+ GiB but only 2.00 GiB is usable \\(SLURM_MEM_PER_NODE\\)" ${T} --set model.preset=small --set train.micro_batch=64 --set train.global_batch=128)
set_property(TEST badinput.memory_slurm_limit APPEND PROPERTY ENVIRONMENT "SLURM_MEM_PER_NODE=2048")

# test_node on 2 ranks: the node-wide verdicts (ranks sharing CPUs)
add_test(NAME mpi.node_check COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
  --oversubscribe $<TARGET_FILE:test_node>)
set_tests_properties(mpi.node_check PROPERTIES LABELS mpi TIMEOUT 120
  ENVIRONMENT "${MT_TEST_ENV}" WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
mt_script_test(signal_startup mpi signal_startup.sh)
