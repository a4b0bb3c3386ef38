# Context parallelism (included from tests/CMakeLists.txt). Label "cp": every
# cp layout trains the model of one rank (ring and Ulysses, alone and with
# tp + sp, pp, dp + ZeRO, recompute), attention memory per rank grows as
# O(T), the ring passes grouped-query attention's key/value heads compact,
# and checkpoints move between cp layouts. The plan's exactness for cp
# layouts is in zero.plan_tiny (tests/zero/plan_accounting.sh). Bad input
# joins the "badinput" label, a short run of both modes and the compact
# key/value heads' ring the "sanitize" label.
mt_test_program(doc_check ${CMAKE_CURRENT_LIST_DIR}/doc_check.c)
mt_script_tests(cp
  equivalence equivalence.sh
  documents   documents.sh
  memory      memory.sh
  resume      resume.sh)
mt_script_test(cp_smoke sanitize smoke.sh)
mt_script_test(cp_gqa sanitize gqa.sh)

set(CPT --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(cp_ring_chunks badinput ../scripts/expect_fail.sh cp_ring_chunks 3
  "parallel.cp = 3 with parallel.cp_mode = ring cuts each sequence into 2 x cp = 6 chunks, which does not divide model.seq_len = 32"
  ${CPT} --set parallel.cp=3)
mt_script_test(cp_ulysses_seq badinput ../scripts/expect_fail.sh cp_ulysses_seq 3
  "parallel.cp = 3 does not divide model.seq_len = 32" ${CPT} --set parallel.cp=3
  --set parallel.cp_mode=ulysses)
mt_script_test(cp_ulysses_heads badinput ../scripts/expect_fail.sh cp_ulysses_heads 3
  "parallel.cp_mode = ulysses splits the attention heads over parallel.cp = 3 ranks: the 4 heads of each tp rank"
  ${CPT} --set parallel.cp=3 --set parallel.cp_mode=ulysses --set model.seq_len=48)
mt_script_test(cp_ulysses_heads_tp badinput ../scripts/expect_fail.sh cp_ulysses_heads_tp 8
  "the 1 heads of each tp rank \\(model.n_head = 4 / parallel.tp = 4\\) do not divide by it"
  ${CPT} --set parallel.cp=2 --set parallel.tp=4 --set parallel.cp_mode=ulysses)
mt_script_test(docs_eot badinput ../scripts/expect_fail.sh docs_eot 1
  "data.documents = true: data.eot = 300 is not a token of the model's vocabulary \\(model.vocab_size = 256\\)"
  ${CPT} --set data.documents=true --set data.eot=300)
mt_script_test(cp_mode badinput ../scripts/expect_fail.sh cp_mode 2
  "parallel.cp_mode: 'zigzag' is not one of ring\\|ulysses" ${CPT} --set parallel.cp=2
  --set parallel.cp_mode=zigzag)
mt_script_test(cp_sp_tokens badinput ../scripts/expect_fail.sh cp_sp_tokens 4
  "parallel.sp = true: parallel.tp = 2 does not divide the 3 tokens of a sequence on each cp rank"
  ${CPT} --set parallel.cp=2 --set parallel.tp=2 --set parallel.sp=true
  --set parallel.cp_mode=ulysses --set model.seq_len=6)
