/* Shared by lib/model's files (not part of the API): a MoE block's
 * activations for one micro-batch, and the routed half of the block
 * (moe.c), which gpt.c calls between its tensor-parallel plumbing. */
#ifndef MT_MODEL_INTERNAL_H
#define MT_MODEL_INTERNAL_H

#include "model/model.h"

/* One MoE block's slot of an activation set (shapes in mt_gpt_acts). */
typedef struct {
  float *probs, *lse, *topw, *frac, *xe, *h, *g, *ys;
  int *top, *slot, *meta, *perm, *inv;
} mt_moe_acts;

/* The routed experts of block l on this rank's local tokens x (N = S x Ts
 * rows, S sequences' slices of Ts tokens): router, routing, dispatch,
 * experts, combine into out (N, C). Collective over the ep, etp and (tokens
 * split over tp) tp groups. */
void mt_moe_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_moe_acts *a,
                    const float *x, float *out, int S, int Ts);
/* Its backward from dout (N, C): the experts' and router's weight
 * gradients into g, the input gradient added to dx (N, C); dloss scales
 * the load-balancing and z-loss terms as it scales each token's loss. */
void mt_moe_backward(mt_gpt *m, int l, const mt_block_tensors *w, mt_block_tensors *g,
                     const mt_moe_acts *a, const float *x, const float *dout, float *dx, int S,
                     int Ts, float dloss);

#endif
