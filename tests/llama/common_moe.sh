# The Llama MoE tests' model and run (sourced after scripts/common.sh): the
# tiny Llama with 4 layers of 4 SwiGLU experts, top-2, every block MoE,
# the load-balancing loss, 8 sequences a step on the shared corpus.
corpus=$(mt_corpus 300000)
moe_common=(--set model.preset=tiny-llama --set model.n_layer=4 --set model.moe_experts=4
            --set model.moe_topk=2 --set model.moe_every=1 --set model.moe_ffn=64
            --set train.moe_aux_coef=0.01 --set train.global_batch=8 --set data.train="$corpus"
            --set train.eval_every=0 --set train.warmup_steps=5 --set train.lr=3e-3)
