/* AdamW on flat ranges, learning-rate schedule, clipping. */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"

void mt_adamw_create(mt_adamw *o, const mt_ops *ops, size_t n, float beta1, float beta2,
                     float eps, float weight_decay) {
  o->ops = ops;
  o->beta1 = beta1;
  o->beta2 = beta2;
  o->eps = eps;
  o->weight_decay = weight_decay;
  o->t = 0;
  o->lr = 0;
  o->n = n;
  o->ranges = NULL;
  o->ranges_cap = 0;
  o->skip = NULL;
  o->m = ops->alloc(MT_MEM_OPTIM, n * sizeof(float));
  o->v = ops->alloc(MT_MEM_OPTIM, n * sizeof(float));
}

void mt_adamw_destroy(mt_adamw *o) {
  o->ops->free(MT_MEM_OPTIM, o->m, o->n * sizeof(float));
  o->ops->free(MT_MEM_OPTIM, o->v, o->n * sizeof(float));
  o->m = o->v = NULL;
  free(o->ranges);
  o->ranges = NULL;
  o->ranges_cap = 0;
}

void mt_adamw_step_begin(mt_adamw *o, float lr) {
  o->t++;
  o->lr = lr;
}

void mt_adamw_update_range(mt_adamw *o, const mt_registry *reg, float *param, void *copy,
                           mt_dtype copy_t, const void *grad, mt_dtype grad_t, float grad_scale,
                           size_t begin, size_t len, size_t moff) {
  size_t end = begin + len;
  if (o->ranges_cap < reg->n) {
    free(o->ranges);
    o->ranges = mt_malloc((size_t)reg->n * sizeof *o->ranges);
    o->ranges_cap = reg->n;
  }
  int nr = 0;
  for (int i = 0; i < reg->n && begin < end; i++) {
    const mt_tensor *t = &reg->t[i];
    size_t tb = t->offset, te = t->offset + t->numel_local;
    if (te <= begin || tb >= end || (o->skip && o->skip[i])) continue;
    size_t a = tb > begin ? tb : begin, b = te < end ? te : end;
    float wd = t->weight_decay ? o->weight_decay : 0.0f;
    o->ranges[nr++] = (mt_adamw_range){a - begin, b - begin, wd};
  }
  if (nr)
    o->ops->adamw_ranges(copy_t, param, copy, grad, grad_t, grad_scale, o->m + moff,
                         o->v + moff, o->ranges, nr, o->lr, o->beta1, o->beta2, o->eps, o->t);
}

float mt_lr_at(int step, int steps, int warmup, float lr, float min_ratio) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  int decay_steps = steps - warmup;
  if (decay_steps <= 1) return lr;
  double progress = (double)(step - warmup) / (double)(decay_steps - 1);
  if (progress > 1.0) progress = 1.0;
  double coeff = 0.5 * (1.0 + cos(3.141592653589793 * progress));
  return (float)(lr * (min_ratio + (1.0 - min_ratio) * coeff));
}

float mt_clip_scale(double grad_norm, float clip) {
  if (clip <= 0.0f || !(grad_norm > clip)) return 1.0f;
  return (float)(clip / grad_norm);
}
