/* parallel: data parallelism over the dp group — bucketed gradient reduction
 * overlapped with backward, and ZeRO-1 (optimizer state sharded over dp) —
 * and the communication of tensor parallelism (Megatron's conjugate f/g
 * operators, and sequence parallelism's all-gather / reduce-scatter along the
 * sequence). Works on the registry's flat buffers; knows the model only
 * through layer offsets handed in by the caller. */
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
  mt_group *tp_g;        /* NULL: no tensor parallelism (see mt_dp_set_tp) */
} mt_dp;

/* Buckets of about bucket_bytes, built from the last tensor backwards and
 * aligned to tensor boundaries; creates the optimizer over this rank's share. */
void mt_dp_create(mt_dp *d, mt_group *dp_group, int zero, const mt_registry *reg,
                  const mt_ops *ops, float *params, float *grads, size_t bucket_bytes,
                  float beta1, float beta2, float eps, float weight_decay);
void mt_dp_destroy(mt_dp *d);

/* Tensor parallelism: the global gradient norm then counts each tp-sharded
 * tensor once per shard (summed over tp_group) and each replicated tensor
 * once. Call after mt_dp_create; tp_group may be NULL or of size 1. */
void mt_dp_set_tp(mt_dp *d, mt_group *tp_group);

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

/* Training state as flat ranges, for checkpoints. which: 0 parameters, 1 AdamW
 * first moments, 2 second moments. for_save: the ranges this rank writes
 * (its dp share of every bucket, so writes are balanced over dp whether or
 * not ZeRO shards the moments); otherwise everything this rank holds.
 * Returns the count; *out is malloc'ed (free it). */
int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out);

/* Bytes one rank sends over dp per optimizer step, from the bucket plan:
 * allreduce (zero=0) or reduce-scatter + all-gather (zero=1). */
double mt_dp_bytes_per_step(const mt_dp *d);

/* ------------------------------------------------------------------ */
/* tensor and sequence parallelism                                     */

/* The tp group as the model sees it. Without tensor parallelism (g NULL or
 * of size 1) every call below is a no-op or a copy. Activations are
 * (B,T,C) row-major; under sequence parallelism (sp) a rank's slice of the
 * sequence is (B,T/size,C), positions [rank*T/size, (rank+1)*T/size). */
typedef struct {
  mt_group *g;
  int size, rank;
  int sp;
  float *scratch;   /* reorder buffer of the reduce-scatter along T (MT_MEM_COMM) */
  size_t scratch_n;
  float *grad_buf;  /* packs the partial gradients of one layer (MT_MEM_COMM) */
  size_t grad_buf_n;
} mt_tp;

/* max_act: the largest (B,T,C) activation, in elements, that will be
 * reduce-scattered; max_partial_grads: the most elements of tp_partial_grad
 * tensors in one range handed to mt_tp_reduce_partial_grads. */
void mt_tp_create(mt_tp *tp, mt_group *g, int sp, size_t max_act, size_t max_partial_grads);
void mt_tp_destroy(mt_tp *tp);

/* Sum (in place) of the ranks' partial results: the forward of a
 * row-parallel layer ("g") or the backward of a column-parallel one ("f"). */
void mt_tp_allreduce(const mt_tp *tp, float *x, size_t n);
void mt_tp_allreduce_max(const mt_tp *tp, float *x, size_t n);
void mt_tp_allreduce_f64(const mt_tp *tp, double *x, size_t n);
/* Sequence parallelism: the slices (B,T/size,C) of every rank -> full
 * (B,T,C) on every rank ... */
void mt_tp_gather_seq(const mt_tp *tp, const float *local, float *full, int B, int T, int C);
/* ... and partial sums (B,T,C) -> this rank's slice (B,T/size,C) of the sum. */
void mt_tp_reduce_scatter_seq(const mt_tp *tp, const float *full, float *local, int B, int T,
                              int C);
/* Sum over the group, in one all-reduce, the gradients of every tensor in
 * the flat range [begin, end) that the registry marks tp_partial_grad. Once
 * per optimizer step, after the last micro-batch's backward of that range. */
void mt_tp_reduce_partial_grads(const mt_tp *tp, const mt_registry *reg, float *grads,
                                size_t begin, size_t end);

#endif
