/* Shared by the dp engine's files (dp.c: the state and its buffers,
 * dp_reduce.c: the gradient reduction, dp_gather.c: ZeRO-3's gathers,
 * dp_update.c: the norm, clipping and AdamW); not part of the API. */
#ifndef MT_PARALLEL_DP_INTERNAL_H
#define MT_PARALLEL_DP_INTERNAL_H

#include "parallel/parallel.h"

static inline const mt_bucket_plan *dp_plan(const mt_dp *d, int k) { return &d->reg->buckets[k]; }

/* the group bucket k is reduced (and sharded) over */
static inline mt_group *dp_group(const mt_dp *d, int k) {
  mt_group *g = d->groups[dp_plan(d, k)->group];
  if (!g) mt_die("dp: bucket %d's reduction group was never given (mt_dp_create)", k);
  return g;
}

/* this rank's part of bucket k: flat begin and length */
static inline size_t dp_part_begin(const mt_dp *d, int k) {
  const mt_bucket_plan *p = dp_plan(d, k);
  return p->begin + (size_t)p->displs[d->reg->group_rank[p->group]];
}
static inline size_t dp_part_len(const mt_dp *d, int k) {
  const mt_bucket_plan *p = dp_plan(d, k);
  return (size_t)p->counts[d->reg->group_rank[p->group]];
}

/* element i of a buffer of type t (NULL stays NULL) */
static inline void *dp_at(void *p, mt_dtype t, size_t i) {
  return p ? (char *)p + i * mt_dtype_bytes(t) : NULL;
}

/* A collective of the state (gradients, parameters) of bucket k: the bytes
 * comm counts for it on the bucket's group also go to d->state_bytes */
#define DP_STATE_CALL(d, k, call)                                             \
  do {                                                                        \
    mt_group *sg_ = dp_group((d), (k));                                       \
    double sb_ = sg_->bytes;                                                  \
    call;                                                                     \
    (d)->state_bytes[dp_plan((d), (k))->group] += sg_->bytes - sb_;           \
  } while (0)

/* A reduction of gradients: also counted as launched during backward
 * (grad_bytes_early) unless mt_dp_finish_sync launches it */
#define DP_GRAD_CALL(d, k, call)                                              \
  do {                                                                        \
    double gb_ = dp_group((d), (k))->bytes;                                   \
    DP_STATE_CALL(d, k, call);                                                \
    gb_ = dp_group((d), (k))->bytes - gb_;                                    \
    (d)->grad_bytes += gb_;                                                   \
    if (!(d)->in_finish) (d)->grad_bytes_early += gb_;                        \
  } while (0)

/* the bucket of unit u (zero >= 2: buckets hold whole units) */
int mt_dp_bucket_of_unit(const mt_dp *d, int u);
/* zero >= 2: bucket k's gradient buffer for this micro-batch (dp_reduce.c) */
void *mt_dp_bucket_buffer(mt_dp *d, int k);

/* zero 0 under Muon: does bucket k hold a matrix Muon updates (its parts
 * then all-gathered after the update) */
int mt_dp_muon_in_bucket(const mt_dp *d, int k);

#endif
