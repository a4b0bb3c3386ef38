# Pipeline parallelism (included from tests/CMakeLists.txt). Label "pp":
# every schedule on tiny (4 layers) gives the single-rank losses, composed
# with dp and tp; --print-schedule. Bad input joins the "badinput" label.
# (The schedules themselves: unit.test_pp_schedule.)

# equivalence.sh PP DP TP SCHEDULE V MICRO_BATCH (global batch 8: m = 8 / (MB x DP))
foreach(sched gpipe 1f1b zb-h1)
  mt_script_test(equiv_pp2_${sched} pp equivalence.sh 2 1 1 ${sched} 1 2)
  mt_script_test(equiv_pp4_${sched} pp equivalence.sh 4 1 1 ${sched} 1 2)
  mt_script_test(equiv_pp2_dp2_${sched} pp equivalence.sh 2 2 1 ${sched} 1 2)
  mt_script_test(equiv_pp2_tp2_${sched} pp equivalence.sh 2 1 2 ${sched} 1 2)
  mt_script_test(equiv_pp2_dp2_tp2_${sched} pp equivalence.sh 2 2 2 ${sched} 1 1)
endforeach()
mt_script_test(equiv_pp2_interleaved pp equivalence.sh 2 1 1 interleaved 2 2)
mt_script_test(equiv_pp2_dp2_interleaved pp equivalence.sh 2 2 1 interleaved 2 1)
mt_script_test(equiv_pp2_tp2_interleaved pp equivalence.sh 2 1 2 interleaved 2 2)
mt_script_test(equiv_pp2_dp2_tp2_interleaved pp equivalence.sh 2 2 2 interleaved 2 1)
mt_script_test(equiv_pp2_1f1b_split pp equivalence.sh 2 1 1 1f1b 1 2 --set parallel.pp_split=1,3)
# recomputation (with the split backward of zb-h1, and under tp + sp)
mt_script_test(equiv_pp4_zb-h1_recompute pp equivalence.sh 4 1 1 zb-h1 1 2 --set train.recompute=true)
mt_script_test(equiv_pp2_tp2_sp_zb-h1_recompute pp equivalence.sh 2 1 2 zb-h1 1 2 --set parallel.sp=true --set train.recompute=true)

# train.recompute = true: bitwise the losses of the same layout without it,
# with less activation memory (recompute.sh PP SCHEDULE MICRO_BATCH)
mt_script_test(recompute_pp1 pp recompute.sh 1 1f1b 2)
mt_script_test(recompute_pp2_1f1b pp recompute.sh 2 1f1b 2)
mt_script_test(recompute_pp2_zb-h1 pp recompute.sh 2 zb-h1 2)

# ZeRO 2 and 3 under every schedule at pp 2 x dp 2 (gpipe and 1f1b one
# level each: the same dp paths as the others; ZeRO 0-1 of the other
# schedules are the equivalence tests above, breadth-first's ZeRO-0 here)
# on tiny with 8 layers: the single-rank losses and norms over 20 steps,
# the plan equal to the counters, bitwise repeatable (zero.sh STEPS CASE...)
set(Z2 "--set parallel.pp=2 --set parallel.dp=2 --set train.micro_batch=1")
set(ZV "--set parallel.virtual_stages=2")
mt_script_test(zero_pp2 pp zero.sh 20
  "zbz3 4 ${Z2} --set parallel.zero=3 --set parallel.schedule=zb-h1"
  "zbz2 4 ${Z2} --set parallel.zero=2 --set parallel.schedule=zb-h1"
  "gpz2 4 ${Z2} --set parallel.zero=2 --set parallel.schedule=gpipe"
  "1f1bz3 4 ${Z2} --set parallel.zero=3 --set parallel.schedule=1f1b"
  "ilvz2 4 ${Z2} --set parallel.zero=2 --set parallel.schedule=interleaved ${ZV}"
  "ilvz3 4 ${Z2} --set parallel.zero=3 --set parallel.schedule=interleaved ${ZV}"
  "bfz0 4 ${Z2} --set parallel.zero=0 --set parallel.schedule=breadth-first ${ZV}"
  "bfz2 4 ${Z2} --set parallel.zero=2 --set parallel.schedule=breadth-first ${ZV}"
  "bfz3 4 ${Z2} --set parallel.zero=3 --set parallel.schedule=breadth-first ${ZV}"
  "1f1bz1off 4 ${Z2} --set parallel.zero=1 --set parallel.schedule=1f1b --set parallel.overlap_dp=false")
# interleaved at pp 4 x dp 2 (8 ranks: fewer steps)
set(Z4 "--set parallel.pp=4 --set parallel.dp=2 --set train.micro_batch=1 ${ZV}")
# ZB-V (two virtual stages a rank in a V, the zb-h1 B/W split) at ZeRO 0-3
mt_script_test(zero_pp2_zbv pp zero.sh 20
  "zbvz3 4 ${Z2} --set parallel.zero=3 --set parallel.schedule=zb-v ${ZV}"
  "zbvz0 4 ${Z2} --set parallel.zero=0 --set parallel.schedule=zb-v ${ZV}"
  "zbvz1 4 ${Z2} --set parallel.zero=1 --set parallel.schedule=zb-v ${ZV}"
  "zbvz2 4 ${Z2} --set parallel.zero=2 --set parallel.schedule=zb-v ${ZV}")
mt_script_test(zero_pp4 pp zero.sh 4
  "ilv4z3 8 ${Z4} --set parallel.zero=3 --set parallel.schedule=interleaved")
# zb-v at pp 4: the V's turn on rank 3 (two chunks of adjacent blocks: a
# ZeRO-2 bucket must not join them), the embedding and the head on rank 0
mt_script_test(zero_pp4_zbv pp zero.sh 4
  "zbv4z2 8 ${Z4} --set parallel.zero=2 --set parallel.schedule=zb-v"
  "zbv4z1 8 ${Z4} --set parallel.zero=1 --set parallel.schedule=zb-v")
# checkpoints saved under one schedule and ZeRO level, resumed under another
mt_script_test(zero_resume pp zero_resume.sh)

mt_script_test(print_schedule pp print_schedule.sh)

# pp = 1: the schedule and its virtual stages do not apply (one stage, in order)
mt_script_test(one_stage pp one_stage.sh)

# each stage holds, reduces over dp and updates only its own tensors
mt_script_test(stage_memory pp stage_memory.sh)
# the LM head's activations once per head pass in flight, not once per set
mt_script_test(head_memory pp head_memory.sh)

# Bad input: one clear line from rank 0, before any collective work.
set(PPT --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(pp_not_dividing_layers badinput ../scripts/expect_fail.sh pp_not_dividing_layers 3
  "parallel.pp = 3 does not divide model.n_layer = 4" ${PPT} --set model.n_layer=4 --set parallel.pp=3 --set train.micro_batch=1)
mt_script_test(pp_split_sum badinput ../scripts/expect_fail.sh pp_split_sum 2
  "parallel.pp_split = '1,2' sums to 3 layers, model.n_layer = 4" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.pp_split=1,2)
mt_script_test(pp_micro_batches_lt_pp badinput ../scripts/expect_fail.sh pp_micro_batches_lt_pp 4
  "train.micro_batches = 2 is smaller than parallel.pp = 4" ${PPT} --set model.n_layer=4 --set parallel.pp=4 --set train.micro_batch=4)
mt_script_test(pp_virtual_not_dividing badinput ../scripts/expect_fail.sh pp_virtual_not_dividing 2
  "parallel.virtual_stages = 3 does not divide the 2 layers per stage" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=3)
mt_script_test(pp_interleaved_m badinput ../scripts/expect_fail.sh pp_interleaved_m 2
  "interleaved needs train.micro_batches = 3 to be a multiple of parallel.pp = 2" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.global_batch=6)
mt_script_test(pp_virtual_without_interleaved badinput ../scripts/expect_fail.sh pp_virtual_without_interleaved 2
  "parallel.virtual_stages = 2 needs parallel.schedule = interleaved" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.virtual_stages=2)
mt_script_test(pp_micro_batches_mismatch badinput ../scripts/expect_fail.sh pp_micro_batches_mismatch 2
  "train.micro_batches = 3 does not match" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set train.micro_batches=3)
mt_script_test(pp_save_params badinput ../scripts/expect_fail.sh pp_save_params 2
  "output.save_params = true needs parallel.pp = 1" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set output.save_params=true)
mt_script_test(pp_bf_virtual_not_dividing badinput ../scripts/expect_fail.sh pp_bf_virtual_not_dividing 2
  "parallel.virtual_stages = 3 does not divide the 2 layers per stage" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.schedule=breadth-first --set parallel.virtual_stages=3)
mt_script_test(pp_zbv_virtual_not_dividing badinput ../scripts/expect_fail.sh pp_zbv_virtual_not_dividing 2
  "parallel.virtual_stages = 2 does not divide the 3 layers per stage" ${PPT} --set model.n_layer=6 --set parallel.pp=2 --set parallel.schedule=zb-v --set parallel.virtual_stages=2)
mt_script_test(pp_zbv_one_chunk badinput ../scripts/expect_fail.sh pp_zbv_one_chunk 2
  "parallel.schedule = zb-v needs parallel.virtual_stages = 2 .got 1." ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.schedule=zb-v --set parallel.virtual_stages=1)
mt_script_test(pp_bad_schedule badinput ../scripts/expect_fail.sh pp_bad_schedule 2
  "parallel.schedule: 'pipedream' is not one of gpipe.1f1b.interleaved.zb-h1" ${PPT} --set parallel.pp=2 --set parallel.schedule=pipedream)

# the pipeline executor under ASan/UBSan (the test command runs label "sanitize" there)
mt_script_test(pp_sanitize sanitize sanitize.sh)

# Token slices (parallel.pp_token_slices, TeraPipe, issue 43): each sequence
# cut into k slices that follow each other through the pipeline gives the
# losses of the single-rank run of whole sequences (1e-5), under 1f1b,
# gpipe and interleaved, composed with dp, tp + sp and recompute
mt_script_test(slices_pp2_k2_1f1b pp equivalence.sh 2 1 1 1f1b 1 2 --set parallel.pp_token_slices=2)
mt_script_test(slices_pp2_k4_1f1b pp equivalence.sh 2 1 1 1f1b 1 2 --set parallel.pp_token_slices=4)
mt_script_test(slices_pp4_k2_1f1b pp equivalence.sh 4 1 1 1f1b 1 2 --set parallel.pp_token_slices=2)
mt_script_test(slices_pp4_k4_1f1b pp equivalence.sh 4 1 1 1f1b 1 2 --set parallel.pp_token_slices=4)
mt_script_test(slices_pp2_k4_gpipe pp equivalence.sh 2 1 1 gpipe 1 2 --set parallel.pp_token_slices=4)
mt_script_test(slices_pp2_k2_interleaved pp equivalence.sh 2 1 1 interleaved 2 2 --set parallel.pp_token_slices=2)
mt_script_test(slices_pp2_k4_interleaved pp equivalence.sh 2 1 1 interleaved 2 4 --set parallel.pp_token_slices=4)
mt_script_test(slices_pp2_dp2_k2_1f1b pp equivalence.sh 2 2 1 1f1b 1 2 --set parallel.pp_token_slices=2)
mt_script_test(slices_pp2_tp2_sp_k2_1f1b pp equivalence.sh 2 1 2 1f1b 1 2 --set parallel.pp_token_slices=2 --set parallel.sp=true)
mt_script_test(slices_pp2_k2_recompute pp equivalence.sh 2 1 1 1f1b 1 2 --set parallel.pp_token_slices=2 --set train.recompute=true)
# token slices: bad input, one line each
mt_script_test(pp_slices_schedule badinput ../scripts/expect_fail.sh pp_slices_schedule 2
  "parallel.pp_token_slices = 2 needs parallel.schedule = gpipe, 1f1b or interleaved .got zb-h1." ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.schedule=zb-h1 --set parallel.pp_token_slices=2)
mt_script_test(pp_slices_not_dividing badinput ../scripts/expect_fail.sh pp_slices_not_dividing 2
  "parallel.pp_token_slices = 3 does not divide the 32 tokens of a sequence" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.pp_token_slices=3)
mt_script_test(pp_slices_cp badinput ../scripts/expect_fail.sh pp_slices_cp 4
  "parallel.pp_token_slices = 2 does not take ring context parallelism .parallel.cp > 1, cp_mode = ring. yet" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.cp=2 --set parallel.pp_token_slices=2)
mt_script_test(pp_slices_sp badinput ../scripts/expect_fail.sh pp_slices_sp 4
  "parallel.tp = 2 does not divide the 1 tokens of a slice" ${PPT} --set model.n_layer=4 --set parallel.pp=2 --set parallel.tp=2 --set parallel.sp=true --set parallel.pp_token_slices=32)
# token slices priced: the virtual device's step and bubble fall with k, the
# plan within 10% of it, the search picks slices where micro-batches are few
mt_script_test(slices_priced pp slices_priced.sh)
# token slices across checkpoints, ZeRO 2 and 3
mt_script_test(slices_resume pp slices_resume.sh)
# token slices under Ulysses context parallelism
mt_script_test(slices_ulysses pp slices_ulysses.sh)
# token slices with documents
mt_script_test(slices_documents pp slices_documents.sh)
mt_script_test(pp_slices_varlen badinput ../scripts/expect_fail.sh pp_slices_varlen 1
  "parallel.pp_token_slices = 2 does not take data.seq_policy = varlen" ${PPT} --set model.n_layer=4 --set data.documents=true --set data.eot=10 --set data.seq_policy=varlen --set parallel.pp_token_slices=2)
