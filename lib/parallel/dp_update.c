/* The dp engine's optimizer step: the global gradient norm over the reduced
 * gradients (summed by placement over tp, pp, ep and etp), clipping, AdamW
 * on this rank's share writing the weights' compute copy in the same pass,
 * and (ZeRO 1, 2) the updated parts all-gathered. */
#include "parallel/dp_internal.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double sqrt_safe(double x) { return x > 0.0 ? sqrt(x) : 0.0; }

/* The reduced gradients (of type gdt): this rank's shard (zero >= 1) or
 * the whole buffer */
static void *reduced_grads(const mt_dp *d) { return d->zero ? d->shard : d->grads; }

/* Sums of squares of the reduced gradients, whose element 0 is flat
 * element begin, over [begin, begin+len), split by the tensors' placement:
 * [0] tp-sharded, [1] replicated over tp; experts (MoE) [2] etp-sharded,
 * [3] replicated over etp. */
static void sumsq_by_placement(const mt_dp *d, void *grad, size_t begin, size_t len,
                               double acc[4]) {
  size_t end = begin + len;
  for (int i = 0; i < d->reg->n; i++) {
    const mt_tensor *t = &d->reg->t[i];
    size_t tb = t->offset, te = t->offset + t->numel_local;
    if (te <= begin || tb >= end) continue;
    size_t a = tb > begin ? tb : begin, b = te < end ? te : end;
    if (d->pp_g && a >= d->norm_skip_begin && b <= d->norm_skip_end) continue;
    int slot = t->group == MT_GROUP_EDP ? (t->etp.kind == MT_PLACE_SHARDED ? 2 : 3)
                                        : (t->tp.kind == MT_PLACE_SHARDED ? 0 : 1);
    acc[slot] += d->ops->sumsq(d->gdt, dp_at(grad, d->gdt, a - begin), b - a);
  }
}

/* The squared norm summed by placement (tensor or pipeline parallelism, or
 * a MoE model): the ranks of a tp group hold different shards of the
 * sharded tensors and identical copies of the replicated ones, so [0] (tp-
 * sharded) is summed over tp and [1] (replicated) counted once; with
 * experts, their tensors are split over ep and etp (one expert-tensor shard
 * per (ep, etp) rank, its ZeRO parts over edp): [2] etp-sharded, [3]
 * replicated over etp, counted once. Under ZeRO each part is first summed
 * over its reduction group; pipeline stages add their tensors over pp. */
static double placed_sumsq(mt_dp *d, int experts) {
  const mt_registry *r = d->reg;
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  void *g = reduced_grads(d);
  if (d->zero) {
    for (int k = 0; k < r->n_buckets; k++)
      sumsq_by_placement(d, dp_at(g, d->gdt, dp_plan(d, k)->shard_off), dp_part_begin(d, k),
                         dp_part_len(d, k), acc);
    mt_allreduce(d->groups[MT_GROUP_DP], acc, 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
    if (experts)
      mt_allreduce(d->groups[MT_GROUP_EDP], acc + 2, 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  } else {
    sumsq_by_placement(d, g, 0, r->numel_local, acc);
  }
  if (d->tp_g) mt_allreduce(d->tp_g, acc, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  if (experts && d->ep_g) mt_allreduce(d->ep_g, acc + 2, 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  if (experts && d->etp_g) mt_allreduce(d->etp_g, acc + 2, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  if (d->pp_g) mt_allreduce(d->pp_g, acc, experts ? 4 : 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  return experts ? acc[0] + acc[1] + acc[2] + acc[3] : acc[0] + acc[1];
}

/* Squared global gradient norm. Without tp or pp: one sum over this rank's
 * buffer (summed over dp x cp under ZeRO); otherwise by placement. */
static double global_sumsq(mt_dp *d) {
  const mt_registry *r = d->reg;
  if (r->n_group_tensors[MT_GROUP_EDP] > 0) return placed_sumsq(d, 1);
  if (d->tp_g || d->pp_g) return placed_sumsq(d, 0);
  double sumsq = d->ops->sumsq(d->gdt, reduced_grads(d), d->zero ? r->shard_numel : r->numel_local);
  if (d->zero) mt_allreduce(d->groups[MT_GROUP_DP], &sumsq, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  return sumsq;
}

/* Per tensor, the part of it in [begin, begin+len) of the reduced gradients
 * grad (element 0 = flat element begin): "name first count sum sumsq wsum",
 * first counted within the rank's local tensor, wsum weighted 1 + (i mod 7)
 * / 8 by that element number i (a permutation changes it) */
static void grad_sums_range(const mt_dp *d, FILE *f, void *grad, size_t begin, size_t len) {
  size_t end = begin + len, es = mt_dtype_bytes(d->gdt);
  for (int i = 0; i < d->reg->n; i++) {
    const mt_tensor *t = &d->reg->t[i];
    size_t tb = t->offset, te = t->offset + t->numel_local;
    if (te <= begin || tb >= end) continue;
    size_t a = tb > begin ? tb : begin, b = te < end ? te : end, n = b - a;
    float *h = mt_malloc(n * sizeof(float));
    void *raw = d->gdt == MT_DT_F32 ? (void *)h : mt_malloc(n * es);
    d->ops->download(raw, dp_at(grad, d->gdt, a - begin), n * es);
    if (raw != h) {
      mt_bf16_to_f32_n(h, raw, n);
      free(raw);
    }
    double sum = 0.0, sumsq = 0.0, wsum = 0.0;
    for (size_t j = 0; j < n; j++) {
      sum += h[j];
      sumsq += (double)h[j] * h[j];
      wsum += h[j] * (1.0 + (double)((a - tb + j) % 7) / 8.0);
    }
    free(h);
    fprintf(f, "%s %zu %zu %.17g %.17g %.17g\n", t->name, a - tb, n, sum, sumsq, wsum);
  }
}

/* The test hook MT_TEST_GRAD_SUMS=PATH (tests only): at the first optimizer
 * step that computes, before clipping, each rank writes PATH.<world rank>: grad_sums_range
 * over the reduced gradients it holds (its shard under ZeRO), so that two
 * runs of one layout (GPU and CPU) can be compared tensor by tensor. */
static void grad_sums_hook(const mt_dp *d) {
  static int done;
  const char *path = getenv("MT_TEST_GRAD_SUMS");
  /* the plan's counted step (null or virtual ops) computes nothing */
  if (done || !path || !*path || !strcmp(d->ops->name, "null") || !strcmp(d->ops->name, "virtual"))
    return;
  done = 1;
  int rank = 0;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  char fn[4096];
  snprintf(fn, sizeof fn, "%s.%d", path, rank);
  FILE *f = fopen(fn, "w");
  if (!f) mt_die("MT_TEST_GRAD_SUMS: cannot write %s", fn);
  void *g = reduced_grads(d);
  if (d->zero)
    for (int k = 0; k < d->reg->n_buckets; k++)
      grad_sums_range(d, f, dp_at(g, d->gdt, dp_plan(d, k)->shard_off), dp_part_begin(d, k),
                      dp_part_len(d, k));
  else
    grad_sums_range(d, f, g, 0, d->reg->numel_local);
  if (fclose(f) != 0) mt_die("MT_TEST_GRAD_SUMS: short write of %s", fn);
}

double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip) {
  const mt_registry *r = d->reg;
  grad_sums_hook(d);
  double norm = sqrt_safe(global_sumsq(d));
  d->last_grad_norm = norm;
  /* the clip factor applied as AdamW reads the gradients (fp32 or bf16:
   * widened on the fly), one op call per bucket */
  float scale = mt_clip_scale(norm, grad_clip);
  mt_adamw_step_begin(&d->opt, lr);
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = dp_plan(d, k);
    /* this rank's part (ZeRO), or the whole bucket; the compute copy (if
     * any) refreshed in the same pass as the master */
    const size_t begin = d->zero ? dp_part_begin(d, k) : p->begin;
    const size_t len = d->zero ? dp_part_len(d, k) : p->end - p->begin;
    float *param = d->master_sharded ? d->params + p->shard_off : d->params + begin;
    void *copy = dp_at(d->copy, d->wdt, d->zero == 3 ? p->shard_off : begin);
    void *g = d->zero ? dp_at(d->shard, d->gdt, p->shard_off) : dp_at(d->grads, d->gdt, begin);
    mt_adamw_update_range(&d->opt, d->reg, param, copy, d->wdt, g, d->gdt, scale, begin, len,
                          p->shard_off);
  }
  /* Muon: each rank updates its parts of the matrices (zero 0 too) */
  if (d->muon) mt_dp_muon_step(d, lr, scale);
  /* zero 1, 2: every rank's updated part to every rank: the compute copy's
   * (a bf16 copy: half the bytes; the master stays sharded), else the
   * parameters; zero 0 under Muon: the master and its copy alike */
  if (d->zero == 1 || d->zero == 2 || (d->zero == 0 && d->muon))
    for (int k = 0; k < r->n_buckets; k++) {
      const mt_bucket_plan *p = dp_plan(d, k);
      void *w = d->copy && d->zero ? d->copy : (void *)d->params;
      mt_dtype wt = d->zero ? d->wdt : MT_DT_F32;
      if (d->zero == 0 && !mt_dp_muon_in_bucket(d, k)) continue;
      DP_STATE_CALL(d, k, mt_allgatherv(dp_group(d, k), NULL, dp_at(w, wt, p->begin), p->counts,
                                        p->displs, wt, d->ops->loc));
      if (d->zero == 0 && d->copy)
        DP_STATE_CALL(d, k, mt_allgatherv(dp_group(d, k), NULL, dp_at(d->copy, d->wdt, p->begin),
                                          p->counts, p->displs, d->wdt, d->ops->loc));
    }
  return norm;
}
