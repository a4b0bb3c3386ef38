# meshplan: layouts ranked by the cost model (issue: plan a scaling campaign).
mt_script_test(exact_tiny plan plan_exact.sh tiny)
mt_script_test(exact_small plan plan_exact.sh small)
mt_script_test(exact_tiny_moe plan plan_exact.sh tiny_moe)
mt_script_test(calibrated plan calibrated.sh)
mt_script_test(calibrate_roundtrip plan calibrate_roundtrip.sh)
mt_script_test(emit_sweep plan emit_sweep.sh)
mt_script_test(bad_profile badinput meshplan_fail.sh bad_profile "key 'inter_us' missing" profile-missing-key)
mt_script_test(no_fit badinput meshplan_fail.sh no_fit "does not fit on 1 node.*GiB short" no-fit)
