# The ladder residual (model.residual = ladder, issue 43): the same ladder
# model under tp (with and without sp), dp at ZeRO-3, cp and MoE's ep and
# etp in fp32 and bf16, different from the standard residual's; its
# checkpoints across layouts and refused by a standard run (label ladder);
# pipeline parallelism, not implemented, refused (label badinput). test_model_fd
# (tests/unit) checks its backward against finite differences.
mt_script_tests(ladder
  layouts ladder_layouts.sh
  moe     ladder_moe.sh
  ckpt    ladder_ckpt.sh)
set(LD --set model.preset=tiny-llama --set data.train=@CORPUS@ --set train.global_batch=8
  --set train.micro_batch=2 --set model.residual=ladder)
mt_script_test(ladder_pp badinput ../scripts/expect_fail.sh ladder_pp 2
  "model.residual = ladder needs parallel.pp = 1" ${LD} --set parallel.pp=2)
