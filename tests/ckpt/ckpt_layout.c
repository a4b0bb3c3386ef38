/* Shape-only checks of the checkpoint layout (no training, no files):
 *
 * 1. gpt2-124m at tp = 1, 2, 3, 4: the vocabulary of 50257 rows is padded to
 *    50304, 50304, 50304, 50432 rows in memory (a multiple of 64 x tp); the boxes every tp rank
 *    writes of every tensor (its whole local shard) cover the canonical,
 *    unpadded tensor exactly once (padding rows are never written), checked
 *    by the loader's own coverage check.
 * 2. The coverage check itself: exact tilings pass; a removed box, an
 *    overlap, a box outside the tensor, an empty box and a tensor with no box
 *    are reported; its cost, counted in steps (not timed), grows as
 *    n log n, not n^2.
 * 3. MoE experts (E x out x in, biases E x out) on the folded mesh at
 *    (ep, etp) = (1,1), (2,1), (4,1), (2,2), (1,4), (4,2): the boxes of every
 *    (ep, etp) rank's whole shard (etp-replicated tensors from etp rank 0
 *    only) cover each canonical tensor exactly once; each box splits into
 *    hyperslabs of the 3-D dataset (a partial first and last expert around
 *    whole ones) of the box's volume, in canonical order, inside the
 *    dataset. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "ckpt/core/ckpt_core.h"
#include "model/model.h"

typedef struct {
  long n;
  char last[400];
} problems;

static void collect(void *ctx, const char *path, const char *problem, const int64_t *row) {
  problems *p = ctx;
  p->n++;
  snprintf(p->last, sizeof p->last, "%s: %s", path, problem);
  (void)row;
}

/* the canonical tensors of reg, as a checkpoint stores them: each a (rows,
 * cols) table, rows the product of the leading dimensions */
static void canonical_tensors(mt_ckpt_tensors *tt, const mt_registry *reg) {
  tt->n = reg->n;
  tt->groups = MT_CKPT_NGROUPS;
  tt->names = calloc((size_t)reg->n, MT_NAME_MAX);
  tt->ext = calloc((size_t)reg->n * MT_CKPT_NGROUPS, 2 * sizeof(int64_t));
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < reg->n; i++) {
      const mt_tensor *t = &reg->t[i];
      snprintf(tt->names[i], MT_NAME_MAX, "%s", t->name);
      int64_t r0 = 1;
      for (int d = 0; d < t->ndim - 1; d++) r0 *= t->shape[d];
      tt->ext[g * reg->n + i][0] = r0;
      tt->ext[g * reg->n + i][1] = t->shape[t->ndim - 1];
    }
}

/* every tp rank's boxes of every tensor of gpt2-124m, then the coverage check */
static void gpt2_at_tp(int tp, int64_t want_padded) {
  mt_model_shape shape;
  mt_model_preset(MT_PRESET_GPT2_124M, &shape);
  mt_ckpt_rows rows = {0};
  mt_ckpt_tensors tt = {0};
  for (int r = 0; r < tp; r++) {
    mt_registry reg;
    mt_registry_init(&reg, tp, r);
    mt_err err = {0};
    shape.vocab_padded = mt_model_pad_vocab(shape.vocab, tp);
    MT_CHECK(mt_gpt_register(&reg, &shape, tp, r, 0, &err) == 0, "register tp=%d: %s", tp,
          err.msg);
    int w = mt_registry_find(&reg, "wte.weight");
    MT_CHECK(w >= 0 && reg.t[w].shape[0] == 50257 && reg.t[w].padded[0] == want_padded &&
                 reg.t[w].local_shape[0] == want_padded / tp,
             "tp=%d: wte is [%lld] rows, padded %lld, local %lld; want 50257, %lld, %lld", tp,
             (long long)reg.t[w].shape[0], (long long)reg.t[w].padded[0],
             (long long)reg.t[w].local_shape[0], (long long)want_padded,
             (long long)(want_padded / tp));
    if (r == 0) canonical_tensors(&tt, &reg); /* gpt2's tensors: 1-D and 2-D */
    /* this rank's whole local shard of each tensor; replicated ones once (tp rank 0) */
    for (int g = 0; g < MT_CKPT_NGROUPS; g++)
      for (int i = 0; i < reg.n; i++) {
        const mt_tensor *t = &reg.t[i];
        if (t->tp.kind == MT_PLACE_REPLICATED && r != 0) continue;
        mt_ckpt_view_t v;
        mt_ckpt_view(t, tp, &v);
        mt_ckpt_boxes bx = {0};
        MT_CHECK(mt_ckpt_boxes_for_range(&v, 0, t->numel_local, &bx) == 0, "boxes");
        for (int b = 0; b < bx.n; b++) {
          MT_CHECK(bx.b[b].start[0] + bx.b[b].count[0] <= v.true_ext[0],
                   "tp=%d rank %d: a box of %s reaches padding row %lld", tp, r, t->name,
                   (long long)(bx.b[b].start[0] + bx.b[b].count[0]));
          mt_ckpt_append_row(&rows, g, i, r, &bx.b[b], 0);
        }
        free(bx.b);
      }
    mt_registry_free(&reg);
  }
  problems p = {0};
  long n = mt_ckpt_check_coverage(rows.rows, rows.n, &tt, collect, &p);
  MT_CHECK(n == 0, "tp=%d: %ld coverage problems, last: %s", tp, n, p.last);
  printf("gpt2-124m tp=%d: wte padded to %lld rows, %d boxes cover every tensor exactly\n", tp,
         (long long)want_padded, rows.n);
  free(rows.rows);
  mt_ckpt_tensors_free(&tt);
}

/* one tensor [R, C] in boxes; returns the problems found */
static long coverage_of(const int64_t (*boxes)[4], int n, int64_t R, int64_t C, problems *p) {
  mt_ckpt_rows rows = {0};
  for (int i = 0; i < n; i++) {
    mt_ckpt_box b = {{boxes[i][0], boxes[i][1]}, {boxes[i][2], boxes[i][3]}, 0, 0};
    mt_ckpt_append_row(&rows, 0, 0, i, &b, 0);
    mt_ckpt_append_row(&rows, 1, 0, i, &b, 0);
    mt_ckpt_append_row(&rows, 2, 0, i, &b, 0);
  }
  char names[1][MT_NAME_MAX] = {"t"};
  int64_t ext[3][2] = {{R, C}, {R, C}, {R, C}};
  mt_ckpt_tensors tt = {.n = 1, .groups = MT_CKPT_NGROUPS, .names = names, .ext = ext};
  memset(p, 0, sizeof *p);
  long k = mt_ckpt_check_coverage(rows.rows, rows.n, &tt, collect, p);
  free(rows.rows);
  return k;
}

static void coverage_cases(void) {
  problems p;
  /* a 6 x 8 tensor: two row blocks, then a row split in three column pieces,
   * then two column blocks (row-parallel tp pieces) */
  const int64_t good[][4] = {{0, 0, 2, 8}, {2, 0, 1, 3}, {2, 3, 1, 2}, {2, 5, 1, 3},
                             {3, 0, 3, 4}, {3, 4, 3, 4}};
  int n = (int)(sizeof good / sizeof good[0]);
  MT_CHECK(coverage_of(good, n, 6, 8, &p) == 0, "exact tiling refused: %s", p.last);
  for (int drop = 0; drop < n; drop++) { /* any one box removed: a hole */
    int64_t less[8][4];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (i != drop) memcpy(less[k++], good[i], sizeof good[i]);
    MT_CHECK(coverage_of((const int64_t(*)[4])less, k, 6, 8, &p) == 3 &&
                 strstr(p.last, "missing from the index"),
             "box %d removed: %ld problems, '%s'", drop, 3L, p.last);
  }
  const int64_t overlap[][4] = {{0, 0, 2, 8}, {1, 0, 2, 8}, {3, 0, 3, 8}};
  MT_CHECK(coverage_of(overlap, 3, 6, 8, &p) == 3 && strstr(p.last, "overlaps"), "overlap: '%s'",
           p.last);
  const int64_t twice[][4] = {{0, 0, 6, 8}, {0, 0, 6, 8}};
  MT_CHECK(coverage_of(twice, 2, 6, 8, &p) == 3 && strstr(p.last, "overlaps"), "twice: '%s'",
           p.last);
  const int64_t outside[][4] = {{0, 0, 6, 8}, {5, 6, 1, 4}};
  MT_CHECK(coverage_of(outside, 2, 6, 8, &p) == 3 && strstr(p.last, "outside"), "outside: '%s'",
           p.last);
  const int64_t empty[][4] = {{0, 0, 6, 8}, {2, 2, 0, 3}};
  MT_CHECK(coverage_of(empty, 2, 6, 8, &p) == 3 && strstr(p.last, "outside"), "empty box: '%s'",
           p.last);
  const int64_t huge[][4] = {{0, 0, 6, 8}, {INT64_MAX - 2, 0, 5, 8}};
  MT_CHECK(coverage_of(huge, 2, 6, 8, &p) == 3, "overflowing box accepted");
  MT_CHECK(coverage_of(good, 0, 6, 8, &p) == 3 && strstr(p.last, "no box"), "no box: '%s'", p.last);
  /* The check's cost, counted in steps (mt_ckpt_coverage_steps: sort
   * comparisons, binary-search probes, segment-tree nodes, rows), so the
   * same on any machine at any load. Two shapes in scrambled order: one-row
   * boxes of an [n, 4] tensor (the sorts dominate) and 1 x 1 boxes of a
   * [2, n/2] tensor (n/2 column segments: the segment tree dominates), at n
   * and 8n boxes. O(n log n) makes 8x the boxes cost 8 log(8n)/log(n) times
   * the steps (about 9.7 here); O(n^2) would make it 64. */
  const int rows = 200000;
  int64_t(*many)[4] = malloc((size_t)rows * sizeof *many);
  for (int shape = 0; shape < 2; shape++) {
    int64_t steps[2];
    int sizes[2] = {rows / 8, rows};
    for (int pass = 0; pass < 2; pass++) {
      int n_box = sizes[pass];
      int64_t R = shape == 0 ? n_box : 2, C = shape == 0 ? 4 : n_box / 2;
      for (int i = 0; i < n_box; i++) {
        int64_t j = ((int64_t)i * 7919) % n_box; /* 7919 is prime: a permutation */
        if (shape == 0) {
          many[i][0] = j, many[i][1] = 0, many[i][2] = 1, many[i][3] = 4;
        } else {
          many[i][0] = j % 2, many[i][1] = j / 2, many[i][2] = 1, many[i][3] = 1;
        }
      }
      int64_t before = mt_ckpt_coverage_steps();
      MT_CHECK(coverage_of((const int64_t(*)[4])many, n_box, R, C, &p) == 0, "%d boxes: '%s'",
               n_box, p.last);
      steps[pass] = mt_ckpt_coverage_steps() - before;
    }
    /* the bound: n log2 n growth with 10% to spare (merge sort's comparisons
     * grow a little faster than n log2 n between these sizes) */
    double nlogn = 8.0 * log2((double)sizes[1]) / log2((double)sizes[0]);
    double ratio = (double)steps[1] / (double)steps[0];
    MT_CHECK(steps[0] > sizes[0] && ratio <= 1.1 * nlogn,
             "%s: 8x the boxes took %.2fx the steps (%lld, %lld; n log n: %.2fx)",
             shape == 0 ? "[n, 4]" : "[2, n/2]", ratio, (long long)steps[0], (long long)steps[1],
             nlogn);
    printf(
        "coverage of %s: %d and %d boxes (x 3 groups) in %lld and %lld steps: %.2fx "
        "(n log n: %.2fx, n^2: 64x)\n",
        shape == 0 ? "[n, 4]" : "[2, n/2]", sizes[0], sizes[1], (long long)steps[0],
        (long long)steps[1], ratio, nlogn);
  }
  /* the [2, n/2] tiling again, one box's place taken by its neighbour's:
   * one cell twice, one missing, in each of the 3 groups */
  many[rows / 2][0] = many[rows / 3][0], many[rows / 2][1] = many[rows / 3][1];
  MT_CHECK(coverage_of((const int64_t(*)[4])many, rows, 2, rows / 2, &p) == 3,
           "200k boxes with a duplicate: %s", p.last);
  printf("coverage: damaged cases found\n");
  free(many);
}

/* every (ep, etp) rank's boxes of a MoE model's tensors, then the coverage check */
static void moe_at(int ep, int etp) {
  mt_model_shape s;
  mt_model_preset(MT_PRESET_TINY, &s);
  s.moe_experts = 8, s.moe_topk = 2, s.moe_every = 1, s.moe_ffn = 24, s.moe_shared = 0;
  mt_ckpt_rows rows = {0};
  mt_ckpt_tensors tt = {0};
  int bad_pieces = 0;
  for (int er = 0; er < ep; er++)
    for (int tr = 0; tr < etp; tr++) {
      mt_registry reg;
      mt_err err = {0};
      mt_gpt_layout lay = {1, 0, 0, s.n_layer, NULL, 0, 0, ep, er, etp, tr};
      MT_CHECK(mt_gpt_register_layout(&reg, &s, &lay, &err) == 0, "register: %s", err.msg);
      if (er == 0 && tr == 0) canonical_tensors(&tt, &reg);
      mt_mesh mesh; /* only the folded coordinates matter here */
      memset(&mesh, 0, sizeof mesh);
      mesh.tp = mesh.cp = mesh.dp = mesh.pp = 1;
      mesh.etp = etp, mesh.ep = ep, mesh.etp_rank = tr, mesh.ep_rank = er;
      for (int g = 0; g < MT_CKPT_NGROUPS; g++)
        for (int i = 0; i < reg.n; i++) {
          const mt_tensor *t = &reg.t[i];
          if (t->group != MT_GROUP_EDP) { /* dense tensors: the first rank writes them */
            if (er != 0 || tr != 0) continue;
          } else if (!mt_ckpt_writes_tensor(t, &mesh)) {
            continue;
          }
          mt_ckpt_view_t v;
          mt_ckpt_view(t, 1, &v);
          mt_ckpt_boxes bx = {0};
          MT_CHECK(mt_ckpt_boxes_for_range(&v, 0, t->numel_local, &bx) == 0, "boxes");
          for (int b = 0; b < bx.n; b++) {
            mt_ckpt_append_row(&rows, g, i, er * etp + tr, &bx.b[b], 0);
            int64_t st[3][MT_MAX_DIMS], ct[3][MT_MAX_DIMS], vol = 0, next = bx.b[b].start[0];
            int np = mt_ckpt_box_pieces(&bx.b[b], t->ndim, t->shape, st, ct);
            for (int q = 0; q < np; q++) {
              int64_t pv = 1;
              for (int d = 0; d < t->ndim; d++) {
                pv *= ct[q][d];
                bad_pieces += st[q][d] < 0 || ct[q][d] < 1 || st[q][d] + ct[q][d] > t->shape[d];
              }
              if (t->ndim == 3) { /* pieces follow each other through the view's rows */
                bad_pieces += st[q][0] * t->shape[1] + st[q][1] != next;
                next += ct[q][0] * ct[q][1];
              }
              vol += pv;
            }
            bad_pieces += vol != bx.b[b].count[0] * bx.b[b].count[1];
          }
          free(bx.b);
        }
      mt_registry_free(&reg);
    }
  problems p = {0};
  long n = mt_ckpt_check_coverage(rows.rows, rows.n, &tt, collect, &p);
  MT_CHECK(n == 0, "MoE ep=%d etp=%d: %ld coverage problems, last: %s", ep, etp, n, p.last);
  MT_CHECK(bad_pieces == 0, "MoE ep=%d etp=%d: %d boxes split into wrong hyperslabs", ep, etp,
           bad_pieces);
  printf("MoE E=8 ep=%d etp=%d: %d boxes cover every tensor exactly, hyperslabs in order\n", ep,
         etp, rows.n);
  free(rows.rows);
  mt_ckpt_tensors_free(&tt);
}

/* HDF5's own error printing is off only inside the module's entry points:
 * a damaged checkpoint is refused with the module's one line (bad input,
 * exit code 2) and the caller's printing setting is as it was before */
static void error_printing_scoped(void) {
  char dir[] = "/tmp/mt_ckpt_scope_XXXXXX";
  if (!mkdtemp(dir)) return;
  char p[256];
  snprintf(p, sizeof p, "%s/ckpt.h5", dir);
  FILE *f = fopen(p, "w");
  fputs("not hdf5", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/MANIFEST.json", dir);
  f = fopen(p, "w");
  fprintf(f, "{\"format\": \"meshtrain-checkpoint\", \"version\": \"1.4.0\", \"step\": 1, "
             "\"mode\": \"shared\", \"files\": [{\"name\": \"ckpt.h5\", \"bytes\": 8}]}\n");
  fclose(f);
  H5E_auto2_t f0 = NULL, f1 = NULL;
  void *d0 = NULL, *d1 = NULL;
  H5Eget_auto2(H5E_DEFAULT, &f0, &d0);
  mt_err e = {0};
  int rc = mt_ckpt_inspect(dir, 0, stdout, &e);
  H5Eget_auto2(H5E_DEFAULT, &f1, &d1);
  MT_CHECK(rc != 0 && mt_err_exit_code(&e) == 2 && strstr(e.msg, "as HDF5"),
        "a damaged ckpt.h5: rc %d, exit code %d, '%s'", rc, mt_err_exit_code(&e), e.msg);
  MT_CHECK(f0 != NULL && f1 == f0 && d1 == d0, "HDF5's error printing not given back");
  printf("a damaged checkpoint: '%s'; HDF5's error printing as it was\n", e.msg);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  error_printing_scoped();
  gpt2_at_tp(1, 50304);
  gpt2_at_tp(2, 50304);
  gpt2_at_tp(3, 50304);
  gpt2_at_tp(4, 50432);
  coverage_cases();
  const int folds[][2] = {{1, 1}, {2, 1}, {4, 1}, {2, 2}, {1, 4}, {4, 2}};
  for (size_t i = 0; i < sizeof folds / sizeof folds[0]; i++) moe_at(folds[i][0], folds[i][1]);
  MPI_Finalize();
  return mt_check_summary("ckpt_layout");
}
