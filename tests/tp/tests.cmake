# Tensor and sequence parallelism (included from tests/CMakeLists.txt).
# Label "tp": equivalence with the unsplit model, exact communication and
# memory accounting, determinism. Bad input joins the "badinput" label, and a
# short tp + sp run the "sanitize" label (both also run in the ASan build).

# run under mpirun by grad_check.sh (not a unit test: it needs 2+ ranks)
mt_test_program(tp_grad_check ${CMAKE_CURRENT_LIST_DIR}/tp_grad_check.c)

# every parameter gradient of the split model against the unsplit one, tp = 2 and 4
mt_script_test(grad_check tp grad_check.sh)

# loss (and grad norm, validation loss) at each of 20 steps equal the dp=1,
# tp=1 run: equivalence.sh DP TP SP MICRO_BATCH (global batch 8; ZeRO-1 when dp > 1)
mt_script_test(equiv_dp1_tp2 tp equivalence.sh 1 2 0 4)
mt_script_test(equiv_dp1_tp2_sp tp equivalence.sh 1 2 1 8)
mt_script_test(equiv_dp1_tp4 tp equivalence.sh 1 4 0 8)
mt_script_test(equiv_dp1_tp4_sp tp equivalence.sh 1 4 1 2)
mt_script_test(equiv_dp2_tp2_zero tp equivalence.sh 2 2 0 2)
mt_script_test(equiv_dp2_tp2_sp_zero tp equivalence.sh 2 2 1 4)

# bytes per step on the tp and dp groups = the analytical formula, and
# parameter bytes per rank = the registry's prediction, exactly; two shapes
# (accounting.sh NAME L C NH T V ARGS: the shape, then the keys that select it;
# wide: V = 130 pads to 256 at tp = 4, where one rank holds no real row)
mt_script_test(accounting_tiny tp accounting.sh tiny 2 32 4 32 256 --set model.preset=tiny)
mt_script_test(accounting_wide tp accounting.sh wide 3 48 4 16 130 --set model.preset=custom
  --set model.n_layer=3 --set model.n_embd=48 --set model.n_head=4 --set model.seq_len=16
  --set model.vocab_size=130)

# same layout twice: bitwise the same losses
mt_script_test(determinism tp determinism.sh)

# Bad input: one clear line from rank 0, before any collective work (tp not
# dividing the heads: badinput.tp_not_dividing_heads in tests/scripts).
set(TPT --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(tp_hidden badinput ../scripts/expect_fail.sh tp_hidden 3
  "parallel.tp = 3 does not divide the hidden size model.n_embd = 32" ${TPT} --set parallel.tp=3)
mt_script_test(tp_world badinput ../scripts/expect_fail.sh tp_world 3
  "parallel.tp = 2 does not divide the 3 MPI ranks" ${TPT} --set parallel.tp=2)
mt_script_test(sp_without_tp badinput ../scripts/expect_fail.sh sp_without_tp 2
  "parallel.sp = true needs parallel.tp > 1" ${TPT} --set parallel.dp=2 --set parallel.sp=true)
mt_script_test(sp_seq_len badinput ../scripts/expect_fail.sh sp_seq_len 2
  "parallel.sp = true: parallel.tp = 2 does not divide model.seq_len = 31" ${TPT} --set parallel.tp=2 --set parallel.sp=true --set model.seq_len=31)

# tp = 2 with sp, ZeRO-1 and accumulation: the tensor-parallel path under ASan/UBSan
mt_script_test(tp_smoke sanitize smoke.sh)
