# Sourced by the documents' balance tests: the long-tail mix of
# apps/scripts/mix_corpus.py in $WORK/longtail.bin, and in mix=() the
# arguments that train the tiny model on it with documents, 6 steps of 16
# windows of seq_len $1 (micro-batch 2), each step's windows hashed.
mix_setup() {
  python3 "$MT_SRC/apps/scripts/mix_corpus.py" "$WORK/longtail.bin"
  mix=(--set model.preset=tiny --set model.seq_len="$1" --set train.steps=6
       --set train.global_batch=16 --set train.micro_batch=2 --set data.train="$WORK/longtail.bin"
       --set data.format=u16 --set model.vocab_size=256 --set train.eval_every=0
       --set ckpt.mode=none --set data.documents=true --set data.eot=255
       --set data.hash_batches=true)
}
