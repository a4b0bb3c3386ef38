/* optim: AdamW over flat ranges of the registry's buffers, the learning-rate
 * schedule, and the clip factor. Knows tensors only through the registry
 * (weight decay per tensor), never through the model. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stddef.h>
#include "kernels/kernels.h"
#include "registry/registry.h"

typedef struct {
  const mt_ops *ops;
  float lr, beta1, beta2, eps, weight_decay;
  int t;        /* updates done so far */
  float *m, *v; /* moments over the elements this rank updates (backend memory) */
  size_t n;     /* moments length */
  mt_adamw_range *ranges; /* host scratch of mt_adamw_update_range: one per tensor */
  int ranges_cap;
  const unsigned char *skip; /* NULL, or per registry tensor: 1 = another optimizer's (Muon) */
} mt_adamw;

void mt_adamw_create(mt_adamw *o, const mt_ops *ops, size_t n, float beta1, float beta2,
                     float eps, float weight_decay);
void mt_adamw_destroy(mt_adamw *o);
/* Update the flat elements [begin, begin+len): their parameters at param
 * (len values), gradients at grad (len values), moments at m[moff, moff+len).
 * Weight decay applies to the elements of tensors registered with
 * weight_decay. Call mt_adamw_step_begin once per optimizer step before the
 * ranges. */
void mt_adamw_step_begin(mt_adamw *o, float lr);
/* copy (len values of type copy_t, or NULL) = the updated parameters in
 * the same pass: the weights' compute copy (bf16: rounded). The gradients
 * are of type grad_t (fp32 or bf16), multiplied by grad_scale (the clip
 * factor) as they are read. One op call (adamw_ranges) for the whole range,
 * one range per tensor it meets. */
void mt_adamw_update_range(mt_adamw *o, const mt_registry *reg, float *param, void *copy,
                           mt_dtype copy_t, const void *grad, mt_dtype grad_t, float grad_scale,
                           size_t begin, size_t len, size_t moff);

/* Linear warmup over warmup steps to lr, then cosine decay to lr*min_ratio at
 * the last step. step is 0-based. */
float mt_lr_at(int step, int steps, int warmup, float lr, float min_ratio);
/* gradient scale for global-norm clipping (1 when clip <= 0 or norm <= clip) */
float mt_clip_scale(double grad_norm, float clip);

#endif
