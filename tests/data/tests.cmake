# Data (issue 23 item 4): a token file that changes under the run ends it
# with one line and exit 3, after the last checkpoint
mt_script_test(changed data changed.sh)
# meshdata tokenize (issue 38): text and JSONL into llm.c shards with a
# Hugging Face tokenizer.json; skips without the Python package tokenizers
mt_script_test(tokenize data tokenize.sh)
