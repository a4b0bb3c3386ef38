# The ladder residual (model.residual = ladder, issue 43): the same ladder
# model under tp (with and without sp), dp at ZeRO-3, cp, pp, recompute
# and MoE's ep and etp in fp32 and bf16, different from the standard
# residual's; its checkpoints across layouts and refused by a standard run;
# the overlap priced by the virtual device and the plan (label ladder).
# test_model_fd (tests/unit) checks its backward against finite
# differences.
mt_script_tests(ladder
  layouts ladder_layouts.sh
  moe     ladder_moe.sh
  ckpt    ladder_ckpt.sh
  overlap ladder_overlap.sh)
