# Keys whose default follows another key, with no edit by hand: a virtual
# run (train.device = virtual) with the default ckpt.mode runs and writes no
# checkpoint (ckpt.mode = none in its config.ini), and parallel.schedule =
# zb-v without parallel.virtual_stages runs its V of 2 chunks a rank.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
C=(--set model.preset=tiny --set model.n_layer=4 --set data.train="$corpus" --set train.steps=2
   --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=0)
mt_train virtual 2 "${C[@]}" --set parallel.dp=2 --set train.device=virtual \
  --set train.virtual_hw=h200 --set output.dir="$WORK/virtual"
grep -qx "mode = none" "$WORK/virtual/config.ini" || fail "virtual run: ckpt.mode is not none"
[ ! -e "$WORK/virtual/checkpoints" ] || fail "virtual run wrote checkpoints"
mt_train zbv 2 "${C[@]}" --set parallel.pp=2 --set parallel.schedule=zb-v --set ckpt.mode=none \
  --set output.dir="$WORK/zbv"
grep -qx "virtual_stages = 2" "$WORK/zbv/config.ini" || fail "zb-v: virtual_stages is not 2"
echo PASS
