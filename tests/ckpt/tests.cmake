# Checkpoint tests (issue: universal HDF5 checkpoints; issue 10: I/O faults).
mt_script_tests(ckpt
  resume  resume.sh
  corrupt corrupt.sh)
# a stop signal mid-run: checkpoint, its exit code, the same losses resumed
mt_script_test(signal ckpt signal.sh USR1 75 "stop requested by SIGUSR1")
mt_script_test(signal_int ckpt signal.sh INT 130 "interrupted by SIGINT")
foreach(phase create write rename latest)
  mt_script_test(crash_${phase} ckpt crash.sh ${phase})
endforeach()
mt_script_tests(ckpt
  modes       modes.sh
  resume_tp   resume_tp.sh
  resume_pp   resume_pp.sh
  resume_bf16 resume_bf16.sh)

# damages a checkpoint for the tests below (not installed, not for users)
mt_test_program(ckpt_edit ${CMAKE_CURRENT_LIST_DIR}/ckpt_edit.c)
# these two test the internals: the private header of lib/ckpt/core, with HDF5
target_include_directories(ckpt_edit PRIVATE ${HDF5_INCLUDE_DIRS})
target_compile_definitions(ckpt_edit PRIVATE ${HDF5_DEFINITIONS})

# shape-only: gpt2-124m's padded vocabulary across tp and the coverage check
# (also a unit test, so the ASan build runs it)
mt_test_program(ckpt_layout ${CMAKE_CURRENT_LIST_DIR}/ckpt_layout.c)
target_include_directories(ckpt_layout PRIVATE ${HDF5_INCLUDE_DIRS})
target_compile_definitions(ckpt_layout PRIVATE ${HDF5_DEFINITIONS})
add_test(NAME ckpt.layout COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe
  $<TARGET_FILE:ckpt_layout>)
set_tests_properties(ckpt.layout PROPERTIES LABELS "ckpt;unit" TIMEOUT 120
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_pml=ob1")

# edited and damaged checkpoints: refused at load and by meshckpt verify alike
mt_script_test(edits ckpt edits.sh shared)
mt_script_test(edits_pw ckpt edits.sh per-writer)
# a vocabulary of 250 padded to 256, saved at tp = 4, loaded at tp = 1 and 2
mt_script_test(padded_vocab ckpt padded_vocab.sh)
# a disk error on one rank (fault switch, real full tmpfs where mount works),
# a read-only directory: one line, exit 3 on every rank within seconds, the
# previous checkpoint verifies and resumes. faults.sh MODE RANKS
foreach(np 2 4)
  foreach(mode shared per-writer async)
    mt_script_test(faults_${mode}_${np} ckpt faults.sh ${mode} ${np})
  endforeach()
endforeach()
# ckpt.keep: old checkpoints moved aside (.trash-*) before they are deleted
mt_script_test(retention ckpt retention.sh)
# issue 14: streaming parallel convert (round trips, bf16, parameters only,
# target layout, killed halfway, bad options); its memory bound on a
# gpt2-124m-shaped state; loads that open only the files they need; Hugging
# Face GPT-2 export/import with an independent numpy forward (and
# transformers' GPT2LMHeadModel where it is installed)
mt_script_tests(ckpt
  convert         convert.sh
  convert_memory  convert_memory.sh
  load_opens      load_opens.sh
  hf              hf.sh
  hf_transformers hf_transformers.sh)
mt_script_test(ckpt_convert sanitize sanitize.sh)
# issue 23: saves on a real, nearly full file system, at sizes found by
# bisection (a tmpfs; skipped where none can be mounted), per mode; and a
# real file-size limit (ulimit -f) on one rank, in every save mode and in
# meshckpt convert
foreach(mode shared per-writer async)
  mt_script_test(near_full_${mode} ckpt near_full.sh ${mode})
endforeach()
mt_script_test(fsize_limit ckpt fsize_limit.sh)
# issue 20: lib/ckpt's layers (core <- tools, core <- interop) hold
mt_script_test(layers ckpt layers.sh)
# Hugging Face LlamaForCausalLM and MixtralForCausalLM: export, import,
# an independent numpy forward, shards, bf16, rotary scaling, token ids;
# bad configs and tensors refused with one line
mt_script_tests(ckpt
  hf_llama     hf_llama.sh
  hf_llama_bad hf_llama_bad.sh
  hf_mixtral   hf_mixtral.sh)
# issue 23: import validates like a save (sharded safetensors, NaN, offsets
# that do not tile, wrong weight_map, PyTorch .bin only)
mt_script_test(hf_validate ckpt hf_validate.sh)
# issue 23 items 7-8, issue 27: init_from takes the shape from the
# checkpoint, a shorter context slices the position table, `latest`
# everywhere, inspect's stored types, meshckpt's exit codes, small files
mt_script_test(new_user ckpt new_user.sh)
# issue 23 item 5: resume into a full disk exits 3 (a runtime condition)
mt_script_test(resume_full ckpt resume_full.sh)
# issue 23 item 1: the fault switch's file-system failures through convert
mt_script_test(convert_faults ckpt convert_faults.sh)
