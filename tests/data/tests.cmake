# Data (issue 23 item 4): a token file that changes under the run ends it
# with one line and exit 3, after the last checkpoint
mt_script_test(changed data changed.sh)
# meshdata tokenize (issue 38): text and JSONL into llm.c shards with a
# Hugging Face tokenizer.json; skips without the Python package tokenizers
mt_script_test(tokenize data tokenize.sh)
# Sources and blends (issue 38): windows equal across layouts and a resume,
# validation loss per source
mt_script_test(blend data blend.sh)
# synthetic tokens (issue 44): the virtual device needs no token file
mt_script_test(synthetic data synthetic.sh)
# data.balance = flops (issue 38): the step's windows over dp by their FLOPs
mt_script_test(balance data balance.sh)
mt_script_test(balance_needs_documents badinput ../scripts/expect_fail.sh balance_needs_documents 1
  "data.balance = flops needs data.documents = true" --set model.preset=tiny
  --set data.train=@CORPUS@ --set data.balance=flops)
# data.seq_policy = varlen (issue 38 item 4): documents kept whole, placed
# over dp x cp by a balanced plan; the losses of the packed windows
mt_script_test(varlen data varlen.sh)
mt_script_test(varlen_needs_documents badinput ../scripts/expect_fail.sh varlen_needs_documents 1
  "data.seq_policy = varlen needs data.documents = true" --set model.preset=tiny
  --set data.train=@CORPUS@ --set data.seq_policy=varlen)
mt_script_test(varlen_pipeline badinput ../scripts/expect_fail.sh varlen_pipeline 2
  "data.seq_policy = varlen runs a varying number of micro-batches per step, which a pipeline"
  --set model.preset=tiny --set data.train=@CORPUS@ --set data.documents=true --set data.eot=10
  --set parallel.pp=2 --set data.seq_policy=varlen)
mt_script_test(varlen_balance badinput ../scripts/expect_fail.sh varlen_balance 1
  "data.seq_policy = varlen balances the work itself: leave data.balance = none"
  --set model.preset=tiny --set data.train=@CORPUS@ --set data.documents=true --set data.eot=10
  --set data.balance=flops --set data.seq_policy=varlen)
# Bad sources and blends: one line from rank 0, exit 2 on every rank, nothing written
set(D --set model.preset=tiny --set parallel.dp=2 --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(source_glob_nomatch badinput ../scripts/expect_fail.sh source_glob_nomatch 2
  "none\\*\\.bin: the pattern matches no file" ${D} --set "data.train=@SHARDS@/none*.bin")
mt_script_test(source_list_missing badinput ../scripts/expect_fail.sh source_list_missing 2
  "missing\\.bin: cannot open" ${D} --set "data.train=@SHARDS@/part00.bin, @SHARDS@/missing.bin")
mt_script_test(source_empty_dir badinput ../scripts/expect_fail.sh source_empty_dir 2
  "empty: the directory holds no token files" ${D} --set "data.train=@EMPTY_DIR@")
mt_script_test(source_mixed_formats badinput ../scripts/expect_fail.sh source_mixed_formats 2
  "b\\.bin: data.format = auto reads it as u16 \\(from its name\\) but .*a\\.bin as llmc" ${D}
  --set "data.train=@MIXED_DIR@")
mt_script_test(blend_weight_negative badinput ../scripts/expect_fail.sh blend_weight_negative 2
  "data.blend: weight -0.5 .* is not a positive number" ${D}
  --set "data.blend=1 a=@SHARDS@, -0.5 b=@SHARDS@/part00.bin")
mt_script_test(blend_weight_no_files badinput ../scripts/expect_fail.sh blend_weight_no_files 2
  "data.blend: weight 0.3 names no files" ${D} --set "data.blend=0.7 @SHARDS@, 0.3")
mt_script_test(blend_weight_not_number badinput ../scripts/expect_fail.sh blend_weight_not_number 2
  "data.blend: 'lots .*' does not start with a weight" ${D} --set "data.blend=lots @SHARDS@")
mt_script_test(blend_source_no_window badinput ../scripts/expect_fail.sh blend_source_no_window 2
  "data.blend source 'short': .*none holds one sequence of T\\+1" ${D}
  --set "data.blend=0.5 web=@SHARDS@, 0.5 short=@SHORT_DIR@")
