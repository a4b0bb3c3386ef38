# The Llama architecture (issue 37): every axis against one rank, in fp32
# and bf16, checkpoints across layouts, the plan equal to the run's counters
# (label llama); bad input (label badinput). test_ops (tests/unit) checks its ops against finite differences.
mt_script_tests(llama
  layouts  layouts.sh
  ckpt     ckpt.sh
  plan     plan.sh
  moe      moe.sh
  moe_ckpt moe_ckpt.sh)
set(L --set model.preset=tiny-llama --set data.train=@CORPUS@ --set train.global_batch=8
  --set train.micro_batch=2)
mt_script_test(llama_kv_not_dividing_heads badinput ../scripts/expect_fail.sh llama_kv 2
  "model.n_kv_head = 3 does not divide model.n_head = 4" ${L} --set parallel.dp=2
  --set model.n_kv_head=3)
mt_script_test(llama_tp_not_dividing_heads badinput ../scripts/expect_fail.sh llama_tp 2
  "parallel.tp = 2 does not divide the attention heads model.n_head = 1" ${L}
  --set parallel.tp=2 --set model.n_head=1 --set model.n_kv_head=1)
mt_script_test(rotary_on_gpt2 badinput ../scripts/expect_fail.sh rotary_gpt2 2
  "model.rope_theta is set, but model.arch = gpt2 has learned positions" ${L}
  --set parallel.dp=2 --set model.preset=tiny --set model.rope_theta=10000)
mt_script_test(gqa_on_gpt2 badinput ../scripts/expect_fail.sh gqa_gpt2 2
  "model.n_kv_head = 2 with model.arch = gpt2: grouped-query attention is model.arch = llama's"
  ${L} --set parallel.dp=2 --set model.preset=tiny --set model.n_kv_head=2)
mt_script_test(llama_moe_etp badinput ../scripts/expect_fail.sh llama_moe_etp 2
  "parallel.etp = 2 does not divide the expert hidden size model.moe_ffn = 63" ${L}
  --set parallel.tp=2 --set parallel.etp=2 --set model.moe_experts=4 --set model.moe_ffn=63)
mt_script_test(sigmoid_z_loss badinput ../scripts/expect_fail.sh sigmoid_z 2
  "train.moe_z_coef = 0.001 with model.moe_router = sigmoid: the router z-loss is a softmax router's"
  ${L} --set parallel.dp=2 --set model.moe_experts=4 --set model.moe_router=sigmoid
  --set train.moe_z_coef=0.001)
