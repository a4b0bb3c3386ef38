/* parallel: data parallelism over the dp group — bucketed gradient reduction
 * overlapped with backward, and ZeRO-1 (optimizer state sharded over dp).
 * Works on the registry's flat buffers; knows the model only through layer
 * offsets handed in by the caller. */
#ifndef MT_PARALLEL_H
#define MT_PARALLEL_H

#include <stddef.h>
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "optim/optim.h"
#include "registry/registry.h"

typedef struct {
  size_t begin, end; /* flat range [begin, end) */
  int *counts;       /* per dp rank, elements of this bucket it owns (ZeRO) */
  int *displs;       /* relative to begin */
  size_t shard_off;  /* where this rank's part sits in the shard buffers */
  mt_request req;
  int launched;
} mt_bucket;

typedef struct {
  mt_group *g;
  int zero;
  const mt_registry *reg;
  const mt_ops *ops;
  float *params, *grads; /* flat, reg->numel_local */
  mt_bucket *buckets;    /* ordered from the end of the flat buffer to the start */
  int n_buckets, next_bucket;
  size_t shard_numel;    /* elements this rank updates (all of them without ZeRO) */
  float *grad_shard;     /* ZeRO: reduced gradient of this rank's shard */
  mt_adamw opt;
  double last_grad_norm;
} mt_dp;

/* Buckets of about bucket_bytes, built from the last tensor backwards and
 * aligned to tensor boundaries; creates the optimizer over this rank's share. */
void mt_dp_create(mt_dp *d, mt_group *dp_group, int zero, const mt_registry *reg,
                  const mt_ops *ops, float *params, float *grads, size_t bucket_bytes,
                  float beta1, float beta2, float eps, float weight_decay);
void mt_dp_destroy(mt_dp *d);

/* Call before the last micro-batch's backward. */
void mt_dp_begin_sync(mt_dp *d);
/* Every gradient at flat offset >= ready_from is final: launch the buckets
 * that are complete (non-blocking). Usable as the model's gradient hook with
 * a small adapter. */
void mt_dp_grads_ready(mt_dp *d, size_t ready_from);
/* Launch what is left and wait for every bucket. */
void mt_dp_finish_sync(mt_dp *d);

/* Global gradient norm over the reduced gradients (collective over dp with
 * ZeRO), then clip, AdamW on this rank's share, and (ZeRO) all-gather the
 * updated parameters. Returns the pre-clip global norm. */
double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip);

/* Bytes one rank sends over dp per optimizer step, from the bucket plan:
 * allreduce (zero=0) or reduce-scatter + all-gather (zero=1). */
double mt_dp_bytes_per_step(const mt_dp *d);

#endif
