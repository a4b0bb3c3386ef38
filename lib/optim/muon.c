/* Muon's matrices, their owners and the Newton-Schulz iteration. */
#include "optim/muon.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* does name contain one of the comma-separated substrings of list */
static int name_listed(const char *name, const char *list) {
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n && *p == ' ') p++, n--;
    while (n && p[n - 1] == ' ') n--;
    if (n) {
      char part[MT_NAME_MAX];
      if (n >= sizeof part) n = sizeof part - 1;
      memcpy(part, p, n);
      part[n] = '\0';
      if (strstr(name, part)) return 1;
    }
    p = e ? e + 1 : NULL;
  }
  return 0;
}

int mt_muon_takes(const mt_tensor *t, const char *exclude) {
  int experts = t->group == MT_GROUP_EDP;
  if (t->ndim != (experts ? 3 : 2)) return 0;
  if (t->axes[0]) return 0; /* labelled: a vocabulary or positions */
  return !name_listed(t->name, exclude);
}

double mt_muon_ns_flops(int rows, int cols, int steps) {
  double m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
  return (double)steps * (4.0 * m * m * n + 2.0 * m * m * m);
}

int mt_muon_matrices(const mt_registry *r, const char *exclude, int ns_steps,
                     mt_muon_matrix **out) {
  size_t cap = 1;
  for (int i = 0; i < r->n; i++)
    if (r->t[i].numel_local && mt_muon_takes(&r->t[i], exclude))
      cap += r->t[i].group == MT_GROUP_EDP ? (size_t)r->t[i].local_shape[0] : 1;
  mt_muon_matrix *m = mt_malloc(cap * sizeof *m);
  int n = 0;
  for (int i = 0; i < r->n; i++) {
    const mt_tensor *t = &r->t[i];
    if (!t->numel_local || !mt_muon_takes(t, exclude)) continue;
    const int experts = t->group == MT_GROUP_EDP, d0 = experts ? 1 : 0;
    const mt_placement *pl = experts ? &t->etp : &t->tp;
    const int count = experts ? (int)t->local_shape[0] : 1;
    for (int e = 0; e < count; e++) {
      mt_muon_matrix *x = &m[n++];
      memset(x, 0, sizeof *x);
      x->tensor = i;
      x->expert = e;
      x->rows = (int)t->shape[d0];
      x->cols = (int)t->shape[d0 + 1];
      x->rows_l = (int)t->local_shape[d0];
      x->cols_l = (int)t->local_shape[d0 + 1];
      x->offset = t->offset + (size_t)e * (size_t)x->rows_l * (size_t)x->cols_l;
      x->split = pl->kind == MT_PLACE_SHARDED ? pl->dim - d0 : -1;
      x->blocks = pl->fused_blocks > 0 ? pl->fused_blocks : 1;
      x->group = t->group;
      x->flops = mt_muon_ns_flops(x->rows, x->cols, ns_steps);
    }
  }
  *out = m;
  return n;
}

typedef struct {
  double flops;
  int index;
} by_cost;

static int cmp_cost(const void *a, const void *b) {
  const by_cost *x = a, *y = b;
  if (x->flops != y->flops) return x->flops > y->flops ? -1 : 1;
  return x->index - y->index;
}

void mt_muon_assign(mt_muon_matrix *m, int n, mt_grad_group g, int group_size, int shard_size) {
  const int slots = group_size * shard_size;
  by_cost *order = mt_malloc(((size_t)n + 1) * sizeof *order);
  double *load = mt_calloc((size_t)slots, sizeof *load);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (m[i].group == g) order[k++] = (by_cost){m[i].flops, i};
  qsort(order, (size_t)k, sizeof *order, cmp_cost);
  for (int j = 0; j < k; j++) {
    int best = 0;
    for (int s = 1; s < slots; s++)
      if (load[s] < load[best]) best = s;
    load[best] += order[j].flops;
    m[order[j].index].owner_g = best / shard_size;
    m[order[j].index].owner_s = best % shard_size;
  }
  free(load);
  free(order);
}

double mt_muon_owned_flops(const mt_muon_matrix *m, int n, mt_grad_group g, int rg, int rs) {
  double f = 0.0;
  for (int i = 0; i < n; i++)
    if (m[i].group == g && m[i].owner_g == rg && m[i].owner_s == rs) f += m[i].flops;
  return f;
}

float mt_muon_lr_scale(mt_muon_scale s, int rows, int cols) {
  if (s == MT_MUON_SCALE_SPECTRAL) return rows > cols ? sqrtf((float)rows / (float)cols) : 1.0f;
  return 0.2f * sqrtf((float)(rows > cols ? rows : cols));
}

/* the scratch's pieces, each 64-byte aligned: X, its successor, the Gram A,
 * A^2 (then b A + c A^2) in t, and the tall path's fp32 Gram */
static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

size_t mt_muon_ns_scratch_bytes(size_t most_elems, size_t most_small, mt_dtype t) {
  size_t es = mt_dtype_bytes(t);
  return 2 * up64(most_elems * es) + 2 * up64(most_small * es) + up64(most_small * sizeof(float));
}

void mt_muon_orthogonalize(const mt_ops *ops, mt_dtype t, float *w, int rows, int cols,
                           int steps, void *scratch) {
  const size_t n = (size_t)rows * (size_t)cols, es = mt_dtype_bytes(t);
  const int m = rows < cols ? rows : cols;
  const size_t mm = (size_t)m * (size_t)m;
  char *p = scratch;
  void *x = p, *xn = p + up64(n * es), *a = p + 2 * up64(n * es);
  void *a2 = (char *)a + up64(mm * es);
  float *af = (float *)((char *)a2 + up64(mm * es));
  double norm = sqrt(ops->sumsq(MT_DT_F32, w, n));
  ops->scale(MT_DT_F32, w, (float)(1.0 / (norm + 1e-7)), n);
  ops->convert(x, t, w, MT_DT_F32, n);
  for (int s = 0; s < steps; s++) {
    if (rows <= cols) {
      /* A = X X^T (rows x rows); X' = a X + (b A + c A A) X */
      ops->matmul_forward(t, a, x, x, NULL, rows, cols, rows);
      ops->matmul_forward(t, a2, a, a, NULL, m, m, m);
      ops->scale(t, a2, MT_MUON_NS_C, mm);
      ops->axpy(t, a2, MT_MUON_NS_B, a, mm);
      ops->copy(t, xn, x, n);
      ops->scale(t, xn, MT_MUON_NS_A, n);
      ops->matmul_backward(t, xn, NULL, NULL, a2, NULL, x, rows, cols, rows);
    } else {
      /* the Gram of the columns, A = X^T X (cols x cols), in fp32 sums;
       * X' = a X + X (b A + c A A) */
      ops->zero(MT_DT_F32, af, mm);
      ops->matmul_backward(t, NULL, af, NULL, x, x, NULL, rows, cols, cols);
      ops->convert(a, t, af, MT_DT_F32, mm);
      ops->matmul_forward(t, a2, a, a, NULL, m, m, m);
      ops->scale(t, a2, MT_MUON_NS_C, mm);
      ops->axpy(t, a2, MT_MUON_NS_B, a, mm);
      ops->matmul_forward(t, xn, x, a2, NULL, rows, cols, cols);
      ops->axpy(t, xn, MT_MUON_NS_A, x, n);
    }
    void *sw = x;
    x = xn;
    xn = sw;
  }
  ops->convert(w, MT_DT_F32, x, t, n);
}
