# meshplan: layouts ranked by the cost model (issue: plan a scaling campaign).
mt_script_test(exact_tiny plan plan_exact.sh tiny)
mt_script_test(exact_small plan plan_exact.sh small)
mt_script_test(exact_tiny_moe plan plan_exact.sh tiny_moe)
mt_script_tests(plan
  documents           documents.sh
  muon_cost           muon_cost.sh
  calibrated          calibrated.sh
  calibrate_roundtrip calibrate_roundtrip.sh
  emit_sweep          emit_sweep.sh)
# meshplan's pricing under ASan/UBSan (in build-asan; an ordinary run elsewhere)
mt_script_test(plan_sanitize sanitize sanitize.sh)
mt_script_test(bad_profile badinput meshplan_fail.sh bad_profile "key 'inter_us' missing" profile-missing-key)
mt_script_test(no_fit badinput meshplan_fail.sh no_fit "does not fit on 4 ranks.*GiB short" no-fit)
# uneven pipeline stages (parallel.pp_first_layers / pp_last_layers): losses of
# 2, 3 and interleaved stages; plan = run; an even checkpoint resumed unevenly
mt_script_test(uneven_equiv plan uneven.sh equiv)
mt_script_test(uneven_ckpt plan uneven.sh ckpt)
# bad splits: one line naming the keys, every rank exits 2
set(UNEVEN --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=1 --set model.n_layer=6)
mt_script_test(uneven_sum badinput ../scripts/expect_fail.sh uneven_sum 3
  "parallel.pp_first_layers = 4 \\+ parallel.pp_last_layers = 3 exceed model.n_layer = 6" ${UNEVEN} --set parallel.pp=3 --set parallel.pp_first_layers=4 --set parallel.pp_last_layers=3)
mt_script_test(uneven_empty badinput ../scripts/expect_fail.sh uneven_empty 3
  "parallel.pp_split = '3,0,3': stage 1 has no layers" ${UNEVEN} --set parallel.pp=3 --set parallel.pp_split=3,0,3)
mt_script_test(uneven_chunks badinput ../scripts/expect_fail.sh uneven_chunks 2
  "parallel.virtual_stages = 2 does not divide the 3 layers of pipeline stage 0" ${UNEVEN} --set parallel.pp=2 --set parallel.pp_last_layers=3 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=2)
# parallel.layout = auto: planned on 1, 2, 4 ranks and trained; a requeue from
# 4 ranks to 2 re-plans and continues the curve; bad input
mt_script_test(auto_ranks plan auto.sh ranks)
mt_script_test(auto_requeue plan auto.sh requeue)
set(AUTO --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set parallel.layout=auto)
mt_script_test(auto_no_fit badinput ../scripts/expect_fail.sh auto_no_fit 2
  "parallel.layout = auto on 2 ranks: gpt2-124m does not fit on 2 ranks of cost-test.*GiB short \\(launch more ranks" ${AUTO} --set model.preset=gpt2-124m --set plan.hw=tests/plan/cost-test.ini)
mt_script_test(auto_no_cost badinput ../scripts/expect_fail.sh auto_no_cost 2
  "parallel.layout = auto needs a cost profile \\(a \\[cost\\] section\\).*key 'devices_per_node' missing.*set plan.hw" ${AUTO} --set plan.hw=a100-sxm)
# the profile auto plans on (the virtual device: train.virtual_hw); tp and ep
# groups inside a node unless plan.across_nodes
mt_script_test(auto_virtual_hw plan auto_hw.sh virtual)
mt_script_test(search_node plan auto_hw.sh node)
# meshplan --only on a layout that does not fit: one line, exit 2
mt_script_test(only_no_fit badinput meshplan_fail.sh only_no_fit "the configured layout \\(tp=1, pp=1, cp=1, dp=1\\) does not fit: it needs .* GiB per device" only-no-fit)
# memory in the run's dtypes (bf16 profile) against the fp32 plan, --dtype, plan.headroom
mt_script_test(dtypes plan dtypes.sh)
# train.precision = bf16 halves the bf16 categories once, in block and materialized attention
mt_script_test(precision plan precision.sh)
# ZeRO-3's gradient and gather buffers: meshplan = the run's counters (mpirun, 2 and 4 ranks)
mt_script_test(zero3_run plan zero3_run.sh)
# the search's lower bounds never exceed a layout's price; its top 10 with and without pruning
mt_script_test(search_bounds plan search_bounds.sh)
# meshplan --stack NAME: each preset prices what its flags price; the default
# is no --stack; a flag beside it overrides; an unknown name is refused
mt_script_test(stacks plan stacks.sh)
mt_script_test(bad_stack badinput meshplan_fail.sh bad_stack "--stack 'megatron' is not a stack preset \\(one of: meshtrain, megatron-2021, .*, llm.c\\)$" bad-stack)
# plan-published.py --cv loso on a synthetic table: a held-out source's rows
# never enter its fold's fit; an outlier source in-sample hides stays off
add_test(NAME plan.published_cv COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/published_cv.py
  ${CMAKE_SOURCE_DIR}/apps/scripts/plan-published.py)
set_tests_properties(plan.published_cv PROPERTIES LABELS plan TIMEOUT 60)
# --compute-efficiency outside (0, 1.5], or not a number: one line, exit 2
mt_script_test(bad_efficiency_zero badinput meshplan_fail.sh bad_efficiency_zero "--compute-efficiency '0' is not a number in \\(0, 1\\.5.: a factor on the profile's matmul and attention rates" efficiency-zero)
mt_script_test(bad_efficiency_high badinput meshplan_fail.sh bad_efficiency_high "--compute-efficiency '1.6' is not a number in \\(0, 1\\.5.: a factor" efficiency-high)
mt_script_test(bad_efficiency_word badinput meshplan_fail.sh bad_efficiency_word "--compute-efficiency 'fast' is not a number in \\(0, 1\\.5.: a factor" efficiency-word)
mt_script_test(bad_dtype badinput meshplan_fail.sh bad_dtype "--dtype 'weights=3': expected CATEGORY=BYTES" bad-dtype)
mt_script_test(bad_collectives badinput meshplan_fail.sh bad_collectives "collectives = 'tree' is not hierarchical or flat" bad-collectives)
# a hardware profile's key once, each number within a sane range, no rate above the peak
mt_script_test(profile_key_twice badinput meshplan_fail.sh profile_key_twice "profile.ini:[0-9]+: \\[cost\\] key 'intra_us' given twice" profile-twice)
mt_script_test(profile_peak_low badinput meshplan_fail.sh profile_peak_low "profile.ini: \\[cost\\] peak_gflops = 5 is below the gemm curve's top \\(90 GFLOP/s\\)" peak-low)
mt_script_test(profile_bw_absurd badinput meshplan_fail.sh profile_bw_absurd "profile.ini:[0-9]+: \\[cost\\] intra_gbs = 1e-300 is outside the accepted range 0.001 to 100000 GB/s" bw-absurd)
