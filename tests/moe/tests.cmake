# Mixture-of-Experts (issue 13): equivalence of the folded layouts with one
# rank, determinism, capacity drops across layouts, checkpoints that reshard
# experts, the exact plan, bad input (label badinput) and a short run under
# the sanitizers (label sanitize). test_moe (tests/unit) holds the ops and
# the finite-difference checks.
foreach(kind dp tp pp sched cp)
  mt_script_test(equiv_${kind} moe equivalence.sh ${kind})
endforeach()
mt_script_tests(moe
  capacity capacity.sh
  reshard  reshard.sh
  plan     plan_accounting.sh
  balance  balance.sh
  llep     llep.sh
  bias_switch bias_switch.sh
  buffers  buffers.sh
  buffers_plan buffers_plan.sh)
mt_script_test(moe_smoke sanitize smoke.sh)

set(M --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8
  --set train.micro_batch=2 --set model.moe_experts=4)
mt_script_test(moe_ep_not_dividing_experts badinput ../scripts/expect_fail.sh moe_ep_experts 2
  "parallel.ep = 3 does not divide model.moe_experts = 4" ${M} --set parallel.dp=2 --set parallel.ep=3)
mt_script_test(moe_ep_not_dividing_ranks badinput ../scripts/expect_fail.sh moe_ep_ranks 2
  "parallel.etp x parallel.ep = 1 x 4 does not divide the 2 ranks of a pipeline stage" ${M}
  --set parallel.dp=2 --set parallel.ep=4)
mt_script_test(moe_topk_beyond_experts badinput ../scripts/expect_fail.sh moe_topk 2
  "model.moe_topk = 5 is more than the model.moe_experts = 4 experts" ${M} --set parallel.dp=2
  --set model.moe_topk=5)
mt_script_test(moe_every_beyond_layers badinput ../scripts/expect_fail.sh moe_every 2
  "model.moe_every = 3 is beyond the model.n_layer = 2 blocks" ${M} --set parallel.dp=2
  --set model.moe_every=3)
mt_script_test(moe_etp_not_dividing_ffn badinput ../scripts/expect_fail.sh moe_etp_ffn 2
  "parallel.etp = 2 does not divide the expert hidden size model.moe_ffn = 33" ${M}
  --set parallel.tp=2 --set parallel.etp=2 --set model.moe_ffn=33)
mt_script_test(moe_ep_without_experts badinput ../scripts/expect_fail.sh moe_ep_dense 2
  "expert parallelism needs a MoE model" ${M} --set model.moe_experts=0 --set parallel.dp=2
  --set parallel.ep=2)
mt_script_test(moe_cp_capacity_ring badinput ../scripts/expect_fail.sh moe_cp_capacity 2
  "model.moe_capacity = 1.5 with parallel.cp = 2 needs parallel.cp_mode = ulysses" ${M}
  --set parallel.cp=2 --set model.moe_capacity=1.5)
mt_script_test(moe_bias_rate_range badinput ../scripts/expect_fail.sh moe_bias_rate 2
  "train.moe_bias_rate must be between 0 and 1 \\(got 1.5\\)" ${M} --set parallel.dp=2
  --set train.moe_balance=bias --set train.moe_bias_rate=1.5)
mt_script_test(moe_llep_without_ep badinput ../scripts/expect_fail.sh moe_llep_ep 2
  "parallel.ep_balance = least-loaded needs parallel.ep > 1" ${M} --set parallel.dp=2
  --set parallel.ep_balance=least-loaded)
mt_script_test(moe_llep_etp badinput ../scripts/expect_fail.sh moe_llep_etp 2
  "parallel.ep_balance = least-loaded needs parallel.etp = 1" ${M} --set parallel.tp=2
  --set parallel.etp=2 --set parallel.ep_balance=least-loaded)
mt_script_test(moe_llep_alpha_range badinput ../scripts/expect_fail.sh moe_llep_alpha 2
  "parallel.ep_balance_alpha must be between 1 and 64 \\(got 0.5\\)" ${M} --set parallel.dp=2
  --set parallel.ep=2 --set parallel.ep_balance=least-loaded --set parallel.ep_balance_alpha=0.5)
mt_script_test(moe_llep_unknown badinput ../scripts/expect_fail.sh moe_llep_unknown 2
  "parallel.ep_balance" ${M} --set parallel.dp=2 --set parallel.ep=2
  --set parallel.ep_balance=busiest)
mt_script_test(moe_bias_init_without_bias badinput ../scripts/expect_fail.sh moe_bias_init 2
  "train.moe_bias_init = 0.5 needs train.moe_balance = bias" ${M} --set parallel.dp=2
  --set train.moe_bias_init=0.5)
