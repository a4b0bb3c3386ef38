/* Documents: a packed batch against its documents run one by one, and
 * context parallelism that exchanges nothing when no document crosses a
 * chunk.
 *
 *   mpirun -n 2 doc_check
 *
 * Three batches of two sequences of T = 32 tokens: "crossing" holds 8
 * documents (one of a single token, boundaries inside and across the
 * chunks of context parallelism; the first document of the second sequence
 * has no end-of-text token before it); "inside" only documents inside the
 * ring's chunks of 8 tokens at cp = 2 (so inside Ulysses' chunks of 16
 * too); "inside ulysses" documents inside Ulysses' chunks that cross the
 * ring's. For gpt2 (learned positions) and llama (rotary positions,
 * grouped-query attention), in fp32:
 *   - the reference: each document alone, on a model of its own length
 *     (cp = 1), its position losses summed and its gradients accumulated;
 *   - the packed batch with documents at cp = 1 (each rank alone), and at
 *     cp = 2 over the two ranks, ring and Ulysses (losses and gradients
 *     summed over the cp group).
 * Checked: the summed losses within a relative 1e-6, every tensor's
 * gradient within a relative 1e-6 (the norm of the difference over the
 * reference's; NaN fails; the largest element error over the tensor's
 * largest element is printed too: fp32 sums in other orders, ~1e-6), at
 * cp = 2 against both the reference and cp = 1's packed run; that the cp
 * group's byte and call counters do not move in a forward and backward
 * whose documents stay inside the layout's chunks, and do where one
 * crosses; that a pipeline's order (forward of a batch inside the chunks,
 * forward of a crossing one, their backwards in turn, each in its own
 * activation set, with recompute) exchanges in the crossing passes only
 * and gives the sum of the two batches' gradients; and that without
 * documents the packed batch differs (the check can fail). Exits 1 naming
 * each failing tensor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/model.h"
#include "../mpi_check.h"
#include "../test_rng.h"

#define TOL 1e-6

enum { B = 2, T = 32, V = 60, EOT = V - 1 };

static int g_rank = 0;

/* the batches: where the end-of-text tokens are (each begins a document),
 * -1 ends; chunks at cp = 2: ring [0, 8), [8, 16), ..., Ulysses [0, 16),
 * [16, 32) */
enum { CROSSING, INSIDE, INSIDE_ULYSSES, N_BATCHES };
static const char *batch_name[N_BATCHES] = {"crossing", "inside", "inside ulysses"};
static const int eot_at[N_BATCHES][B][8] = {
    {{0, 5, 6, 17, 30, -1}, {9, 24, -1}},
    {{0, 3, 8, 9, 16, 24, 29, -1}, {8, 13, 16, 24, -1}},
    {{0, 5, 16, 20, -1}, {4, 16, 28, -1}}};
/* does cp = 2 exchange over its group for batch k: ring (mode 0), Ulysses (1) */
static int exchanges(int k, int mode) { return k == CROSSING || (k == INSIDE_ULYSSES && !mode); }

static void make_batch(int k, int *inp, int *tgt) {
  for (int b = 0; b < B; b++)
    for (int p = 0; p < T; p++) {
      inp[b * T + p] = (int)(mt_splitmix64(100 + b * T + p) % (uint64_t)(V - 1));
      tgt[b * T + p] = (int)(mt_splitmix64(900 + b * T + p) % (uint64_t)V);
    }
  for (int b = 0; b < B; b++)
    for (int i = 0; eot_at[k][b][i] >= 0; i++) inp[b * T + eot_at[k][b][i]] = EOT;
}

/* the parameters: init, then noise keyed by (tensor, index), so that norms
 * and biases matter */
static void perturb(mt_gpt *m) {
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    uint64_t key = 0;
    for (const char *c = t->name; *c; c++) key = (key ^ (uint8_t)*c) * 1099511628211ULL;
    int norm = strstr(t->name, "ln") != NULL || strstr(t->name, "norm") != NULL;
    for (size_t j = 0; j < t->numel_local; j++) {
      double u = rng_hash_sym(key, j);
      m->params[t->offset + j] = (float)(norm ? 1.0 + 0.2 * u : 0.15 * u);
    }
  }
}

static const mt_tensor *find(const mt_gpt *m, const char *name) {
  for (int i = 0; i < m->reg.n; i++)
    if (!strcmp(m->reg.t[i].name, name)) return &m->reg.t[i];
  return NULL;
}

static int create(mt_gpt *m, mt_model_shape s, int Tm, const mt_gpt_parallel *par) {
  mt_err e = {0};
  s.seq_len = Tm;
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  int rc = par ? mt_gpt_create_parallel(m, &s, mt_ops_cpu(), B, par, &e)
               : mt_gpt_create(m, &s, mt_ops_cpu(), 1, &e);
  if (rc != 0) MT_FAIL("create (T = %d): %s", Tm, e.msg);
  return rc;
}

/* The reference: each document alone. Its tensors' parameters are the
 * packed model's (wpe: the first rows); gradients summed into ref (the
 * packed model's layout, double); returns the summed position losses. */
static double one_by_one(const mt_model_shape *s, const mt_gpt *packed, const int *inp,
                         const int *tgt, double *ref) {
  double loss = 0.0;
  for (int b = 0; b < B; b++) {
    int doc[T];
    mt_doc_starts(inp + b * T, T, EOT, doc);
    for (int p0 = 0; p0 < T;) {
      int p1 = p0 + 1;
      while (p1 < T && doc[p1] == p0) p1++;
      mt_gpt d;
      if (create(&d, *s, p1 - p0, NULL) != 0) return NAN;
      for (int i = 0; i < d.reg.n; i++) {
        const mt_tensor *t = &d.reg.t[i], *pt = find(packed, t->name);
        memcpy(d.params + t->offset, packed->params + pt->offset, t->numel_local * sizeof(float));
      }
      mt_gpt_zero_grad(&d);
      loss += (double)mt_gpt_forward(&d, inp + b * T + p0, tgt + b * T + p0, 1) * (p1 - p0);
      mt_gpt_backward(&d, 1.0f, NULL, NULL);
      for (int i = 0; i < d.reg.n; i++) {
        const mt_tensor *t = &d.reg.t[i], *pt = find(packed, t->name);
        for (size_t j = 0; j < t->numel_local; j++) ref[pt->offset + j] += d.grads[t->offset + j];
      }
      mt_gpt_destroy(&d);
      p0 = p1;
    }
  }
  return loss;
}

/* what the attention's cp group has moved: this rank's bytes and calls
 * (nothing alone) */
typedef struct {
  double bytes;
  long calls;
} traffic;

static traffic traffic_of(const mt_gpt *m) {
  const mt_group *g = m->attn.g;
  return g ? (traffic){g->bytes, g->calls} : (traffic){0.0, 0};
}

static traffic traffic_since(const mt_gpt *m, traffic t0) {
  traffic t = traffic_of(m);
  return (traffic){t.bytes - t0.bytes, t.calls - t0.calls};
}

/* a batch's tokens (the whole sequences' doc) and this rank's (li, lt) */
static void local_batch(const mt_gpt *m, const int *inp, const int *tgt, int *doc, int *li,
                        int *lt) {
  for (int b = 0; b < B; b++) {
    mt_doc_starts(inp + b * T, T, EOT, doc + b * T);
    mt_cp_take_tokens(&m->attn.lay, inp + b * T, li + b * m->T);
    mt_cp_take_tokens(&m->attn.lay, tgt + b * T, lt + b * m->T);
  }
}

/* The packed batch on m (this rank's tokens under cp): summed losses and
 * gradients over the cp group comm (MPI_COMM_SELF: alone) into *loss, g;
 * the cp group's traffic in the forward and backward into *moved */
static void packed_run(mt_gpt *m, const int *inp, const int *tgt, int documents, MPI_Comm comm,
                       double *loss, double *g, traffic *moved) {
  int doc[B * T], li[B * T], lt[B * T];
  local_batch(m, inp, tgt, doc, li, lt);
  mt_gpt_zero_grad(m);
  traffic t0 = traffic_of(m);
  *loss = (double)mt_gpt_forward_docs(m, li, lt, documents ? doc : NULL, B) * B * m->T;
  mt_gpt_backward(m, 1.0f, NULL, NULL);
  *moved = traffic_since(m, t0);
  for (size_t j = 0; j < m->reg.numel_local; j++) g[j] = m->grads[j];
  MPI_Allreduce(MPI_IN_PLACE, loss, 1, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, g, (int)m->reg.numel_local, MPI_DOUBLE, MPI_SUM, comm);
}

/* One pass of the whole model over a batch in activation set a, as a
 * pipeline schedule runs it (the batch's documents staged first, the
 * gradients accumulating); returns the forward's loss sum, the cp group's
 * traffic in the pass into *moved */
static double one_pass(mt_gpt *m, mt_pass pass, mt_gpt_acts *a, const int *li, const int *lt,
                       const int *doc, traffic *moved) {
  mt_piece pieces[8];
  const int L = m->shape.n_layer;
  if (L + 3 > 8) {
    MT_FAIL("one_pass: %d layers, room for 5", L);
    return NAN;
  }
  int n = mt_gpt_pass(m, pass, 0, L, 1, 1, pieces);
  mt_pass_args x = {.a = a, .l0 = 0, .l1 = L, .B = B, .inputs = li, .targets = lt, .doc = doc,
                    .dloss = 1.0f, .head = 1};
  traffic t0 = traffic_of(m);
  mt_gpt_stage_documents(m, doc, B);
  double loss = 0.0;
  for (int i = 0; i < n; i++) loss += mt_gpt_run_piece(m, pass, &pieces[i], &x);
  *moved = traffic_since(m, t0);
  return loss;
}

/* checks that a run moved nothing over the cp group, or something */
static void check_traffic(const char *tag, traffic t, int expect) {
  char what[160];
  snprintf(what, sizeof what, "%s: cp group %s (%.0f bytes, %ld calls)", tag,
           expect ? "exchanges" : "exchanges nothing", t.bytes, t.calls);
  mt_check_true(what, expect ? t.bytes > 0 && t.calls > 0 : t.bytes == 0 && t.calls == 0);
}

/* worst gradient error over the tensors, |g - ref| / |ref| per tensor
 * (NaN: infinite); fails naming each tensor over TOL */
static double compare(const char *tag, const mt_gpt *m, double loss, double ref_loss,
                      const double *g, const double *ref, int report) {
  double worst = 0.0, worst_elem = 0.0;
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    double emax = 0.0, gmax = 0.0, d2 = 0.0, r2 = 0.0;
    for (size_t j = 0; j < t->numel_local; j++) {
      double r = ref[t->offset + j], d = g[t->offset + j] - r;
      gmax = mt_worst(gmax, fabs(r));
      emax = mt_worst(emax, fabs(d));
      d2 += d * d, r2 += r * r;
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    worst = mt_worst(worst, rel);
    worst_elem = mt_worst(worst_elem, gmax > 0 ? emax / gmax : emax);
    if (report && !(rel <= TOL))
      MT_FAIL("%s: gradient of %s: relative error %.3e (norm %.3e)", tag, t->name, rel, sqrt(r2));
  }
  double lrel = fabs(loss - ref_loss) / fabs(ref_loss);
  if (report) {
    if (!(lrel <= TOL)) MT_FAIL("%s: loss sum %.9g vs one by one %.9g", tag, loss, ref_loss);
    if (g_rank == 0)
      printf("  %-30s loss rel %.1e, gradient rel %.1e (largest element error %.1e of the "
             "tensor's largest)\n", tag, lrel, worst, worst_elem);
  }
  return mt_worst(worst, lrel);
}

/* Forward of batch INSIDE, forward of CROSSING, then their backwards, each
 * in its own activation set (a pipeline's order), under recompute: the
 * traffic of each pass, and the summed losses and gradients against those
 * of cp = 1's packed runs (loss1, g1) */
static void interleaved(const char *arch, const mt_model_shape *s, mt_mesh *mesh, int mode,
                        const mt_gpt *one, double loss1[N_BATCHES], double *g1[N_BATCHES]) {
  mt_gpt cp;
  mt_gpt_parallel par = {.cp = &mesh->cp_g, .cp_mode = mode ? MT_CP_ULYSSES : MT_CP_RING,
                         .documents = 1, .recompute = 1};
  if (create(&cp, *s, T, &par) != 0) return;
  const size_t n = cp.reg.numel_local;
  memcpy(cp.params, one->params, n * sizeof(float));
  const int order[2] = {INSIDE, CROSSING};
  int inp[B * T], tgt[B * T], doc[2][B * T], li[2][B * T], lt[2][B * T];
  mt_gpt_acts set[2];
  const size_t set_bytes = mt_gpt_acts_numel(&cp, s->n_layer, B, 1) * sizeof(float);
  void *mem[2];
  for (int i = 0; i < 2; i++) {
    make_batch(order[i], inp, tgt);
    local_batch(&cp, inp, tgt, doc[i], li[i], lt[i]);
    mem[i] = cp.ops->alloc(MT_MEM_ACTIV, set_bytes);
    mt_gpt_acts_bind(&cp, &set[i], mem[i], s->n_layer, B, 1);
  }
  mt_gpt_zero_grad(&cp);
  double loss = 0.0, ref_loss = 0.0;
  char tag[128];
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < 2; i++) {
      traffic t;
      loss += one_pass(&cp, pass ? MT_PASS_BACKWARD : MT_PASS_FORWARD, &set[i], li[i], lt[i],
                       doc[i], &t);
      snprintf(tag, sizeof tag, "%s cp=2 %s, pipeline order: %s of %s", arch,
               mode ? "ulysses" : "ring", pass ? "backward" : "forward", batch_name[order[i]]);
      check_traffic(tag, t, order[i] == CROSSING);
    }
  double *g = calloc(n, sizeof(double)), *ref = calloc(n, sizeof(double));
  for (size_t j = 0; j < n; j++) g[j] = cp.grads[j];
  MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, mesh->cp_g.comm);
  MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_DOUBLE, MPI_SUM, mesh->cp_g.comm);
  for (int i = 0; i < 2; i++) {
    ref_loss += loss1[order[i]];
    for (size_t j = 0; j < n; j++) ref[j] += g1[order[i]][j];
  }
  snprintf(tag, sizeof tag, "%s cp=2 %s, pipeline order vs cp=1", arch, mode ? "ulysses" : "ring");
  compare(tag, &cp, loss, ref_loss, g, ref, 1);
  for (int i = 0; i < 2; i++) cp.ops->free(MT_MEM_ACTIV, mem[i], set_bytes);
  free(g), free(ref);
  mt_gpt_destroy(&cp);
}

static void run(const char *arch, const mt_model_shape *s, mt_mesh *mesh) {
  mt_gpt one;
  if (create(&one, *s, T, &(mt_gpt_parallel){.documents = 1}) != 0) return;
  mt_gpt_init_params(&one, 11);
  perturb(&one);
  int inp[B * T], tgt[B * T];
  size_t n = one.reg.numel_local;
  double *ref[N_BATCHES], *g1[N_BATCHES], ref_loss[N_BATCHES], loss1[N_BATCHES];
  double *g = calloc(n, sizeof(double)), loss;
  traffic t;
  char tag[128];
  mt_gpt plain;
  int have_plain = create(&plain, *s, T, &(mt_gpt_parallel){.documents = 0}) == 0;
  if (have_plain) memcpy(plain.params, one.params, n * sizeof(float));
  for (int k = 0; k < N_BATCHES; k++) {
    make_batch(k, inp, tgt);
    ref[k] = calloc(n, sizeof(double)), g1[k] = calloc(n, sizeof(double));
    ref_loss[k] = one_by_one(s, &one, inp, tgt, ref[k]);
    snprintf(tag, sizeof tag, "%s cp=1 %s", arch, batch_name[k]);
    packed_run(&one, inp, tgt, 1, MPI_COMM_SELF, &loss1[k], g1[k], &t);
    compare(tag, &one, loss1[k], ref_loss[k], g1[k], ref[k], 1);
    if (!have_plain) continue;
    /* without documents the same batch must come out different */
    packed_run(&plain, inp, tgt, 0, MPI_COMM_SELF, &loss, g, &t);
    double d = compare(tag, &plain, loss, ref_loss[k], g, ref[k], 0);
    snprintf(tag, sizeof tag, "%s %s: packed without documents differs", arch, batch_name[k]);
    mt_check_true(tag, d > 1e-3);
  }
  for (int mode = 0; mode < 2; mode++) {
    mt_gpt cp;
    mt_gpt_parallel par = {.cp = &mesh->cp_g, .cp_mode = mode ? MT_CP_ULYSSES : MT_CP_RING,
                           .documents = 1};
    if (create(&cp, *s, T, &par) != 0) continue;
    memcpy(cp.params, one.params, n * sizeof(float)); /* cp splits no tensor */
    for (int k = 0; k < N_BATCHES; k++) {
      make_batch(k, inp, tgt);
      packed_run(&cp, inp, tgt, 1, mesh->cp_g.comm, &loss, g, &t);
      snprintf(tag, sizeof tag, "%s cp=2 %s %s", arch, mode ? "ulysses" : "ring", batch_name[k]);
      check_traffic(tag, t, exchanges(k, mode));
      compare(tag, &cp, loss, ref_loss[k], g, ref[k], 1);
      snprintf(tag, sizeof tag, "%s cp=2 %s %s vs cp=1", arch, mode ? "ulysses" : "ring",
               batch_name[k]);
      compare(tag, &cp, loss, loss1[k], g, g1[k], 1);
    }
    mt_gpt_destroy(&cp);
    interleaved(arch, s, mesh, mode, &one, loss1, g1);
  }
  for (int k = 0; k < N_BATCHES; k++) free(ref[k]), free(g1[k]);
  free(g);
  if (have_plain) mt_gpt_destroy(&plain);
  mt_gpt_destroy(&one);
}

int main(int argc, char **argv) {
  int world = mt_mpi_test_begin(&argc, &argv, &g_rank);
  mt_mesh mesh;
  mt_err e = {0};
  if (world != 2 || mt_mesh_create(&mesh, 1, 2, 1, 1, &e) != 0) {
    MT_FAIL("doc_check: run on 2 ranks (%s)", e.msg);
    return mt_mpi_test_end("doc_check");
  }
  const mt_model_shape gpt2 = {.n_layer = 2, .n_embd = 32, .n_head = 4, .vocab = V};
  const mt_model_shape llama = {.n_layer = 2, .n_embd = 32, .n_head = 4, .vocab = V,
                                .arch = MT_ARCH_LLAMA, .n_kv_head = 2, .ffn = 24,
                                .norm_eps = 1e-5f, .rope_theta = 10000.0};
  run("gpt2 (learned positions)", &gpt2, &mesh);
  run("llama (rotary, gqa)", &llama, &mesh);
  mt_mesh_destroy(&mesh);
  return mt_mpi_test_end("doc_check");
}
