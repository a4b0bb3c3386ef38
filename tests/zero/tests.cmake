# ZeRO 0-3 and the plan (issue: one trainer, one placement model).
set(S ${CMAKE_CURRENT_SOURCE_DIR})
mt_script_test(equivalence zero equivalence.sh)
mt_script_test(plan_tiny zero plan_accounting.sh tiny)
mt_script_test(plan_small zero plan_accounting.sh small)
mt_script_test(plan_tiny_bf16 zero plan_accounting.sh tiny_bf16)
mt_script_test(plan_offline zero plan_offline.sh)
# optim.name = muon: the plan's Newton-Schulz FLOPs and exchange bytes = the run's
mt_script_test(plan_muon zero plan_muon.sh)
mt_script_test(no_lookup_by_position zero no_lookup_by_position.sh)

set(T --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(zero_out_of_range badinput ../scripts/expect_fail.sh zero_out_of_range 2
  "parallel.zero must be between 0 and 3" ${T} --set parallel.dp=2 --set parallel.zero=4)
mt_script_test(zero3_save_params badinput ../scripts/expect_fail.sh zero3_save_params 2
  "output.save_params = true needs parallel.zero <= 2" ${T} --set parallel.dp=2 --set parallel.zero=3 --set output.save_params=true)
mt_script_test(resume zero resume.sh)
mt_script_test(smoke sanitize smoke.sh)
mt_script_test(ops_only zero ops_only.sh)
