/* The dp engine's Muon, distributed as Canzona: every matrix Muon updates
 * has one owner rank, chosen by cost (mt_muon_assign, the same on every
 * rank); each step the ranks that hold pieces of a matrix send them to its
 * owner, the owner orthogonalises the whole matrix once and sends each
 * piece back, and each rank applies the update to what it holds.
 *
 * A matrix's pieces are held along two axes: the reduction group (dp x cp,
 * or edp for experts), whose ranks each hold a part of every bucket (their
 * ZeRO part; at zero 0 the same split, though every rank holds the whole),
 * and the shard axis (tp, or etp for experts), whose ranks each hold a
 * shard of the matrix (or the whole of a replicated one). So the exchange
 * has two levels, each one all-to-all:
 *   1. over the reduction group: each rank's parts of the momentum-mixed
 *      gradient to the owner's reduction-group rank, which then holds the
 *      whole of its shard of the matrix (buffer L, by owner shard rank);
 *   2. over the shard axis: the shards to the owner, which places them in
 *      the whole matrix (R, then the fp32 matrix), orthogonalises it and
 *      puts the result back where the shards came from;
 * then the same two all-to-alls backwards. The momentum lives where AdamW's
 * first moment would (opt.m, over this rank's part): a checkpoint holds it
 * in the same place, the second moments of Muon's tensors stay zero. */
#include "parallel/dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include "optim/muon.h"

/* a matrix's flat elements [a, a + len), in the exchange buffer at `at` */
typedef struct {
  int x, k;
  size_t a, len, at;
} piece;

typedef struct {
  mt_group *red, *shard; /* NULL: one rank */
  int G, S, gr, sr;
  piece *mine, *inc;     /* mine: by owner's group rank; inc: by source */
  int n_mine, n_inc;
  size_t *c1, *r1;       /* level 1 counts (G) */
  size_t *c2, *r2;       /* level 2 counts (S) */
  size_t n1s, n1r, n2r;  /* elements of send1, recv1 (= L), R */
  int *ic;               /* replicated: the all-gather's counts, then displacements (G each) */
  void *send1, *recv1, *L, *R;
} muon_group;

struct mt_dp_muon {
  mt_muon_opts o;
  mt_muon_matrix *mat;
  int n_mat;
  unsigned char *skip;   /* per tensor: Muon's (AdamW leaves it) */
  unsigned char *in_bucket; /* per bucket: holds a matrix of Muon's */
  size_t *at_L;          /* per matrix its group's rank owns: its place in L */
  size_t *at_R;          /* per matrix this rank owns: its place in each source's block of R */
  muon_group grp[MT_NGROUPS];
  float *full;           /* the whole matrix being orthogonalised (fp32) */
  size_t full_n;
  void *scratch;
  size_t scratch_bytes;
  mt_dtype ns_t;
  mt_dp_muon_stats st;
};

/* the bucket holding flat element a of group g (a tensor lies in one) */
static int bucket_of(const mt_dp *d, mt_grad_group g, size_t a) {
  for (int k = 0; k < d->reg->n_buckets; k++) {
    const mt_bucket_plan *p = dp_plan(d, k);
    if (p->group == g && a >= p->begin && a < p->end) return k;
  }
  mt_die("muon: flat element %zu is in no bucket of group %s", a, mt_grad_group_name(g));
}

/* rank q's piece of matrix x (q's part of x's bucket): *a, returns the length */
static size_t piece_of(const mt_dp *d, const mt_muon_matrix *x, int k, int q, size_t *a) {
  const mt_bucket_plan *p = dp_plan(d, k);
  size_t pb = p->begin + (size_t)p->displs[q], pe = pb + (size_t)p->counts[q];
  size_t xb = x->offset, xe = x->offset + (size_t)x->rows_l * (size_t)x->cols_l;
  size_t lo = xb > pb ? xb : pb, hi = xe < pe ? xe : pe;
  *a = lo;
  return hi > lo ? hi - lo : 0;
}

static size_t local_numel(const mt_muon_matrix *x) { return (size_t)x->rows_l * x->cols_l; }

static void *fp32_alloc(const mt_ops *ops, size_t n) {
  return ops->alloc(MT_MEM_OPTIM, (n ? n : 1) * sizeof(float));
}

/* the first rank of the group whose part of bucket k reaches past flat
 * element a (parts are consecutive in rank order) */
static int first_part(const mt_bucket_plan *p, int G, size_t a) {
  int lo = 0, hi = G - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (p->begin + (size_t)p->displs[mid] + (size_t)p->counts[mid] > a) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* does rank q's part of bucket p begin before matrix x ends */
static int part_before_end(const mt_bucket_plan *p, int q, const mt_muon_matrix *x) {
  return p->begin + (size_t)p->displs[q] < x->offset + local_numel(x);
}

static int cmp_piece_src(const void *a, const void *b) {
  const piece *x = a, *y = b; /* by source (in k), then matrix */
  if (x->k != y->k) return x->k < y->k ? -1 : 1;
  return (x->x > y->x) - (x->x < y->x);
}

static int cmp_piece_owner(const void *a, const void *b) {
  const piece *x = a, *y = b; /* by owner (in at), then matrix */
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return (x->x > y->x) - (x->x < y->x);
}

/* The exchange's layouts of group g, in time and memory linear in the
 * matrices (and the pieces that come in), whatever the ranks: thousands of
 * experts over thousands of ranks plan in milliseconds. */
static void plan_group(mt_dp *d, struct mt_dp_muon *u, mt_grad_group g) {
  muon_group *m = &u->grp[g];
  m->red = d->groups[g];
  m->shard = g == MT_GROUP_DP ? d->tp_g : d->etp_g;
  m->G = d->reg->group_size[g];
  m->gr = d->reg->group_rank[g];
  m->S = m->shard ? m->shard->size : 1;
  m->sr = m->shard ? m->shard->rank : 0;
  mt_muon_assign(u->mat, u->n_mat, g, m->G, m->S);
  /* the busiest rank's FLOPs and the mean, over the group x shard ranks */
  double total = 0.0, most = 0.0;
  double *load = mt_calloc((size_t)m->G * m->S, sizeof *load);
  for (int i = 0; i < u->n_mat; i++)
    if (u->mat[i].group == g) {
      total += u->mat[i].flops;
      load[(size_t)u->mat[i].owner_g * m->S + u->mat[i].owner_s] += u->mat[i].flops;
    }
  for (size_t s = 0; s < (size_t)m->G * m->S; s++) most = load[s] > most ? load[s] : most;
  free(load);
  u->st.busiest_flops += most;
  u->st.mean_flops += total / (m->G * m->S);
  /* replicated (the naive baseline): every rank its own owner of every
   * matrix; the layouts below then make the exchange an all-gather */
  for (int i = 0; u->o.replicated && i < u->n_mat; i++)
    if (u->mat[i].group == g) u->mat[i].owner_g = m->gr, u->mat[i].owner_s = m->sr;
  m->c1 = mt_calloc((size_t)m->G, sizeof(size_t));
  m->r1 = mt_calloc((size_t)m->G, sizeof(size_t));
  m->c2 = mt_calloc((size_t)m->S, sizeof(size_t));
  m->r2 = mt_calloc((size_t)m->S, sizeof(size_t));
  /* each matrix's bucket (a tensor lies in one), and how many pieces come
   * in: the sources whose parts meet the matrices this group rank owns */
  int *bucket = mt_calloc((size_t)u->n_mat + 1, sizeof(int));
  size_t n_inc = 0;
  for (int i = 0; i < u->n_mat; i++) {
    const mt_muon_matrix *x = &u->mat[i];
    if (x->group != g) continue;
    bucket[i] = bucket_of(d, g, x->offset);
    if (x->owner_g != m->gr) continue;
    const mt_bucket_plan *p = dp_plan(d, bucket[i]);
    size_t a;
    for (int q = first_part(p, m->G, x->offset); q < m->G && part_before_end(p, q, x); q++)
      n_inc += piece_of(d, x, bucket[i], q, &a) > 0;
  }
  m->mine = mt_calloc((size_t)u->n_mat + 1, sizeof(piece));
  m->inc = mt_calloc(n_inc + 1, sizeof(piece));
  /* level 1 out: this rank's pieces, by their owner's group rank (kept in
   * at until the offsets are known), then matrix */
  for (int i = 0; i < u->n_mat; i++) {
    const mt_muon_matrix *x = &u->mat[i];
    size_t a, len = x->group == g ? piece_of(d, x, bucket[i], m->gr, &a) : 0;
    if (len) m->mine[m->n_mine++] = (piece){i, bucket[i], a, len, (size_t)x->owner_g};
  }
  qsort(m->mine, (size_t)m->n_mine, sizeof(piece), cmp_piece_owner);
  for (int j = 0; j < m->n_mine; j++) {
    m->c1[m->mine[j].at] += m->mine[j].len;
    m->mine[j].at = m->n1s;
    m->n1s += m->mine[j].len;
  }
  /* L: the matrices this group rank owns, by owner shard rank; what goes to
   * shard rank s is c2[s]; and the pieces that come in, by source (kept in
   * k until sorted), then matrix */
  size_t at = 0;
  for (int s = 0; s < m->S; s++)
    for (int i = 0; i < u->n_mat; i++) {
      const mt_muon_matrix *x = &u->mat[i];
      if (x->group != g || x->owner_g != m->gr || x->owner_s != s) continue;
      u->at_L[i] = at;
      at += local_numel(x);
      m->c2[s] += local_numel(x);
      const mt_bucket_plan *p = dp_plan(d, bucket[i]);
      for (int q = first_part(p, m->G, x->offset); q < m->G && part_before_end(p, q, x); q++) {
        size_t a, len = piece_of(d, x, bucket[i], q, &a);
        if (len) m->inc[m->n_inc++] = (piece){i, q, a, len, 0};
      }
    }
  qsort(m->inc, (size_t)m->n_inc, sizeof(piece), cmp_piece_src);
  for (int j = 0; j < m->n_inc; j++) {
    piece *p = &m->inc[j];
    m->r1[p->k] += p->len;
    p->k = bucket[p->x];
    p->at = m->n1r;
    m->n1r += p->len;
  }
  free(bucket);
  if (m->n1r != at) mt_die("muon: %zu elements come in, %zu expected", m->n1r, at);
  /* R: from each shard rank, its shard of each matrix this rank owns */
  size_t within = 0;
  for (int i = 0; i < u->n_mat; i++) {
    const mt_muon_matrix *x = &u->mat[i];
    if (x->group != g || x->owner_g != m->gr || x->owner_s != m->sr) continue;
    u->at_R[i] = within;
    within += local_numel(x);
    u->st.owned_flops += x->flops;
    u->st.owned++;
    size_t whole = (size_t)x->rows * x->cols;
    if (whole > u->full_n) u->full_n = whole;
  }
  for (int s = 0; s < m->S; s++) m->r2[s] = within;
  m->n2r = within * (size_t)m->S;
  const mt_ops *ops = d->ops;
  m->send1 = fp32_alloc(ops, m->n1s);
  m->recv1 = fp32_alloc(ops, m->n1r);
  m->L = fp32_alloc(ops, m->n1r);
  if (u->o.replicated) { /* the all-gather's counts and where each source's pieces go */
    m->ic = mt_calloc(2 * (size_t)m->G, sizeof(int));
    for (int q = 0, displ = 0; q < m->G; displ += (int)m->r1[q], q++) {
      m->ic[q] = (int)m->r1[q];
      m->ic[m->G + q] = displ;
    }
  }
  m->R = m->S > 1 ? fp32_alloc(ops, m->n2r) : NULL;
}

void mt_dp_muon_create(mt_dp *d, const mt_muon_opts *o) {
  struct mt_dp_muon *u = mt_calloc(1, sizeof *u);
  u->o = *o;
  u->n_mat = mt_muon_matrices(d->reg, o->exclude, o->ns_steps, &u->mat);
  u->skip = mt_calloc((size_t)d->reg->n + 1, 1);
  for (int i = 0; i < u->n_mat; i++) u->skip[u->mat[i].tensor] = 1;
  u->at_L = mt_calloc((size_t)u->n_mat + 1, sizeof(size_t));
  u->at_R = mt_calloc((size_t)u->n_mat + 1, sizeof(size_t));
  for (int g = 0; g < MT_NGROUPS; g++) {
    int any = 0;
    for (int i = 0; i < u->n_mat; i++) any |= u->mat[i].group == (mt_grad_group)g;
    if (any) plan_group(d, u, (mt_grad_group)g);
  }
  u->ns_t = o->ns_dtype;
  /* the iteration's scratch, for the largest matrix owned here */
  size_t most_small = 0;
  for (int i = 0; i < u->n_mat; i++) {
    const mt_muon_matrix *x = &u->mat[i];
    const muon_group *m = &u->grp[x->group];
    if (x->owner_g != m->gr || x->owner_s != m->sr) continue;
    size_t s = (size_t)(x->rows < x->cols ? x->rows : x->cols);
    if (s * s > most_small) most_small = s * s;
  }
  u->full = fp32_alloc(d->ops, u->full_n);
  /* the buckets zero 0 all-gathers after the update, found once */
  u->in_bucket = mt_calloc((size_t)d->reg->n_buckets + 1, 1);
  for (int k = 0; k < d->reg->n_buckets; k++)
    for (int i = 0; i < u->n_mat && !u->in_bucket[k]; i++)
      u->in_bucket[k] = u->mat[i].offset >= dp_plan(d, k)->begin &&
                        u->mat[i].offset < dp_plan(d, k)->end;
  u->scratch_bytes = mt_muon_ns_scratch_bytes(u->full_n, most_small, u->ns_t);
  u->scratch = d->ops->alloc(MT_MEM_OPTIM, u->scratch_bytes);
  d->muon = u;
  d->opt.skip = u->skip;
}

void mt_dp_muon_destroy(mt_dp *d) {
  struct mt_dp_muon *u = d->muon;
  if (!u) return;
  const mt_ops *ops = d->ops;
  for (int g = 0; g < MT_NGROUPS; g++) {
    muon_group *m = &u->grp[g];
    if (!m->c1) continue;
    ops->free(MT_MEM_OPTIM, m->send1, (m->n1s ? m->n1s : 1) * sizeof(float));
    ops->free(MT_MEM_OPTIM, m->recv1, (m->n1r ? m->n1r : 1) * sizeof(float));
    ops->free(MT_MEM_OPTIM, m->L, (m->n1r ? m->n1r : 1) * sizeof(float));
    if (m->R) ops->free(MT_MEM_OPTIM, m->R, (m->n2r ? m->n2r : 1) * sizeof(float));
    free(m->c1);
    free(m->r1);
    free(m->c2);
    free(m->r2);
    free(m->mine);
    free(m->inc);
    free(m->ic);
  }
  ops->free(MT_MEM_OPTIM, u->full, (u->full_n ? u->full_n : 1) * sizeof(float));
  ops->free(MT_MEM_OPTIM, u->scratch, u->scratch_bytes);
  free(u->mat);
  free(u->skip);
  free(u->in_bucket);
  free(u->at_L);
  free(u->at_R);
  free(u);
  d->muon = NULL;
  d->opt.skip = NULL;
}

int mt_dp_muon_in_bucket(const mt_dp *d, int k) { return d->muon && d->muon->in_bucket[k]; }

mt_dp_muon_stats mt_dp_muon_get_stats(const mt_dp *d) {
  mt_dp_muon_stats none = {0};
  if (!d->muon) return none;
  mt_dp_muon_stats s = d->muon->st;
  s.matrices = d->muon->n_mat;
  return s;
}

/* an all-to-all of the exchange, its bytes counted apart (*bytes); the
 * plan's recording leaves it out (the cost model prices the busiest
 * rank's exchange apart, cost_muon.c) */
static void exchange(mt_group *g, void *send, const size_t *sc, void *recv, const size_t *rc,
                     mt_loc loc, double *bytes) {
  double b = g->bytes;
  mt_comm_rec_mark(MT_REC_SKIP_BEGIN, 0, 0);
  mt_alltoallv(g, send, sc, recv, rc, MT_DT_F32, loc);
  mt_comm_rec_mark(MT_REC_SKIP_END, 0, 0);
  *bytes += g->bytes - b;
}

/* where piece p's element a sits in the shard-indexed buffers (moments;
 * the gradient shard at zero >= 1) */
static size_t shard_index(const mt_dp *d, int k, size_t a) {
  const mt_bucket_plan *p = dp_plan(d, k);
  return p->shard_off + (a - (d->zero ? dp_part_begin(d, k) : p->begin));
}

static float *at32(void *base, size_t i) { return (float *)base + i; }

/* shard r of x (rows_l x cols_l at shard) into the whole matrix full, or
 * back (back = 1): its rows (split 0) or columns (1), block by block */
static void place(const mt_ops *ops, const mt_muon_matrix *x, float *full, float *shard, int r,
                  int back) {
  if (x->split == 0) {
    const size_t rb = (size_t)x->rows_l / x->blocks, RB = (size_t)x->rows / x->blocks;
    for (int j = 0; j < x->blocks; j++) {
      float *f = full + ((size_t)j * RB + (size_t)r * rb) * x->cols;
      float *s = shard + (size_t)j * rb * x->cols_l;
      if (back) ops->copy_2d(MT_DT_F32, s, x->cols_l, f, x->cols, rb, x->cols);
      else ops->copy_2d(MT_DT_F32, f, x->cols, s, x->cols_l, rb, x->cols);
    }
  } else {
    const size_t cb = (size_t)x->cols_l / x->blocks, CB = (size_t)x->cols / x->blocks;
    for (int j = 0; j < x->blocks; j++) {
      float *f = full + (size_t)j * CB + (size_t)r * cb;
      float *s = shard + (size_t)j * cb;
      if (back) ops->copy_2d(MT_DT_F32, s, x->cols_l, f, x->cols, x->rows, cb);
      else ops->copy_2d(MT_DT_F32, f, x->cols, s, x->cols_l, x->rows, cb);
    }
  }
}

/* orthogonalise the matrices this rank owns, in R (L where S = 1), in place */
static void orthogonalise_owned(mt_dp *d, struct mt_dp_muon *u, muon_group *m, mt_grad_group g) {
  const mt_ops *ops = d->ops;
  void *R = m->S > 1 ? m->R : m->L; /* one shard rank: R is L */
  const size_t block = m->r2[0];
  for (int i = 0; i < u->n_mat; i++) {
    const mt_muon_matrix *x = &u->mat[i];
    if (x->group != g || x->owner_g != m->gr || x->owner_s != m->sr) continue;
    const size_t n = local_numel(x), whole = (size_t)x->rows * x->cols;
    /* the whole matrix: the shards placed (a replicated one: this rank's copy) */
    if (x->split < 0 || m->S == 1)
      ops->copy(MT_DT_F32, u->full, at32(R, (size_t)m->sr * block + u->at_R[i]), n);
    else
      for (int s = 0; s < m->S; s++) place(ops, x, u->full, at32(R, s * block + u->at_R[i]), s, 0);
    mt_muon_orthogonalize(ops, u->ns_t, u->full, x->rows, x->cols, u->o.ns_steps, u->scratch);
    ops->scale(MT_DT_F32, u->full, mt_muon_lr_scale(u->o.scale, x->rows, x->cols), whole);
    for (int s = 0; s < m->S; s++) {
      float *dst = at32(R, (size_t)s * block + u->at_R[i]);
      if (x->split < 0 || m->S == 1) ops->copy(MT_DT_F32, dst, u->full, n);
      else place(ops, x, u->full, dst, s, 1);
    }
  }
}

/* the update on this rank's parts, whose O is in send1: p = p (1 - lr wd)
 * - lr O, and the compute copy from it */
static void apply_update(mt_dp *d, const struct mt_dp_muon *u, const muon_group *m, float lr) {
  const mt_ops *ops = d->ops;
  for (int j = 0; j < m->n_mine; j++) {
    const piece *p = &m->mine[j];
    const mt_bucket_plan *bp = dp_plan(d, p->k);
    const mt_tensor *t = &d->reg->t[u->mat[p->x].tensor];
    size_t off = d->master_sharded ? bp->shard_off + (p->a - dp_part_begin(d, p->k)) : p->a;
    float *w = d->params + off, wd = t->weight_decay ? d->opt.weight_decay : 0.0f;
    if (wd != 0.0f) ops->scale(MT_DT_F32, w, 1.0f - lr * wd, p->len);
    ops->axpy(MT_DT_F32, w, -lr, at32(m->send1, p->at), p->len);
    if (d->copy) {
      size_t ci = d->zero == 3 ? bp->shard_off + (p->a - dp_part_begin(d, p->k)) : p->a;
      ops->convert(dp_at(d->copy, d->wdt, ci), d->wdt, w, MT_DT_F32, p->len);
    }
  }
}

/* optim.muon_distribution = replicated, the naive baseline: every rank
 * gathers every matrix whole (an all-gather over the reduction group, then
 * over the shard axis) and orthogonalises all of them, keeping the part it
 * holds; send1 then holds O for this rank's pieces */
static void replicated_exchange(mt_dp *d, struct mt_dp_muon *u, muon_group *m,
                                mt_grad_group g) {
  const mt_ops *ops = d->ops;
  double b = m->red->bytes;
  mt_allgatherv(m->red, m->send1, m->recv1, m->ic, m->ic + m->G, MT_DT_F32, ops->loc);
  u->st.bytes_red[g] += m->red->bytes - b;
  for (int j = 0; j < m->n_inc; j++) {
    const piece *p = &m->inc[j];
    ops->copy(MT_DT_F32, at32(m->L, u->at_L[p->x] + (p->a - u->mat[p->x].offset)),
              at32(m->recv1, p->at), p->len);
  }
  if (m->S > 1) {
    b = m->shard->bytes;
    mt_allgather(m->shard, m->L, m->R, m->n1r, MT_DT_F32, ops->loc);
    u->st.bytes_shard[g] += m->shard->bytes - b;
  }
  orthogonalise_owned(d, u, m, g);
  if (m->S > 1) ops->copy(MT_DT_F32, m->L, at32(m->R, (size_t)m->sr * m->n1r), m->n1r);
  for (int j = 0; j < m->n_mine; j++) {
    const piece *p = &m->mine[j];
    ops->copy(MT_DT_F32, at32(m->send1, p->at),
              at32(m->L, u->at_L[p->x] + (p->a - u->mat[p->x].offset)), p->len);
  }
}

void mt_dp_muon_step(mt_dp *d, float lr, float grad_scale) {
  struct mt_dp_muon *u = d->muon;
  const mt_ops *ops = d->ops;
  const float mu = u->o.momentum;
  for (int g = 0; g < MT_NGROUPS; g++) {
    muon_group *m = &u->grp[g];
    if (!m->c1) continue;
    /* the momentum over this rank's parts, and the mix sent on */
    for (int j = 0; j < m->n_mine; j++) {
      const piece *p = &m->mine[j];
      size_t si = shard_index(d, p->k, p->a);
      void *grad = d->zero ? dp_at(d->shard, d->gdt, si) : dp_at(d->grads, d->gdt, p->a);
      float *mom = d->opt.m + si, *v = at32(m->send1, p->at);
      ops->convert(v, MT_DT_F32, grad, d->gdt, p->len);
      if (grad_scale != 1.0f) ops->scale(MT_DT_F32, v, grad_scale, p->len);
      ops->scale(MT_DT_F32, mom, mu, p->len);
      ops->axpy(MT_DT_F32, mom, 1.0f, v, p->len);
      if (u->o.nesterov) ops->axpy(MT_DT_F32, v, mu, mom, p->len);
      else ops->copy(MT_DT_F32, v, mom, p->len);
    }
    if (u->o.replicated) {
      replicated_exchange(d, u, m, (mt_grad_group)g);
      apply_update(d, u, m, lr);
      continue;
    }
    /* level 1: the pieces to their owners' group ranks, into L (by owner
     * shard rank) */
    exchange(m->red, m->send1, m->c1, m->recv1, m->r1, ops->loc, &u->st.bytes_red[g]);
    for (int j = 0; j < m->n_inc; j++) {
      const piece *p = &m->inc[j];
      const mt_muon_matrix *x = &u->mat[p->x];
      ops->copy(MT_DT_F32, at32(m->L, u->at_L[p->x] + (p->a - x->offset)),
                at32(m->recv1, p->at), p->len);
    }
    /* level 2: the shards to their owner, orthogonalised, and back */
    if (m->S > 1) exchange(m->shard, m->L, m->c2, m->R, m->r2, ops->loc, &u->st.bytes_shard[g]);
    orthogonalise_owned(d, u, m, (mt_grad_group)g);
    if (m->S > 1) exchange(m->shard, m->R, m->r2, m->L, m->c2, ops->loc, &u->st.bytes_shard[g]);
    /* level 1 back: each piece of the update to the rank it came from */
    for (int j = 0; j < m->n_inc; j++) {
      const piece *p = &m->inc[j];
      const mt_muon_matrix *x = &u->mat[p->x];
      ops->copy(MT_DT_F32, at32(m->recv1, p->at),
                at32(m->L, u->at_L[p->x] + (p->a - x->offset)), p->len);
    }
    exchange(m->red, m->recv1, m->r1, m->send1, m->c1, ops->loc, &u->st.bytes_red[g]);
    apply_update(d, u, m, lr);
  }
}
