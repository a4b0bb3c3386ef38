# Checkpoint tests (issue: universal HDF5 checkpoints).
mt_script_test(resume ckpt resume.sh)
mt_script_test(corrupt ckpt corrupt.sh)
mt_script_test(signal ckpt signal.sh)
foreach(phase create write rename latest)
  mt_script_test(crash_${phase} ckpt crash.sh ${phase})
endforeach()
mt_script_test(modes ckpt modes.sh)
mt_script_test(resume_tp ckpt resume_tp.sh)
