# Shared by the MoE tests: the tiny MoE model (4 experts, top-2, every
# block, a load-balancing and a z-loss), its data, and a runner.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 300000)
MOE=(--set model.preset=tiny --set model.moe_experts=4 --set model.moe_topk=2
     --set model.moe_every=1 --set train.moe_aux_coef=0.01 --set train.moe_z_coef=0.001
     --set train.global_batch=8 --set data.train="$corpus" --set train.warmup_steps=5
     --set train.lr=3e-3 --set ckpt.mode=none)
# run NAME NP ARGS...: meshtrain into $WORK/NAME (log $WORK/NAME.log)
run() { mt_train "$1" "$2" "${MOE[@]}" --set output.dir="$WORK/$1" "${@:3}"; }
