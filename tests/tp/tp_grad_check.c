/* Tensor-parallel model against the unsplit one, tensor by tensor.
 *
 *   mpirun -n TP tp_grad_check        (TP = 2 or 4; every rank is one tp rank)
 *
 * Every rank builds the unsplit model (tp = 1) and its tp shard of the same
 * model, with and without sequence parallelism, and gives both the same
 * logical parameters: first mt_gpt_init_params (which must be layout-free:
 * every local element equals the unsplit one at its global index), then
 * O(0.1..1) noise that is a function of (tensor, logical index) only, so
 * LayerNorm weights and every bias matter; wte padding rows get garbage, which
 * must change nothing. Then two micro-batches of forward + backward (gradient
 * accumulation; the last one with the training loop's hook that sums the
 * partial gradients of sp over tp, layer by layer) and a shorter forward
 * (B = 1, as evaluation's last batch). Checked on every rank:
 *   - losses equal the unsplit model's, relative 1e-5;
 *   - every local gradient element equals the unsplit gradient at its global
 *     index, to 1e-4 of the tensor's largest unsplit gradient (both are fp32
 *     computations; only summation orders differ, observed errors ~1e-7);
 *   - wte padding rows get exactly zero gradient;
 *   - tensors replicated over tp hold bit-identical gradients on all ranks
 *     (else replicated parameters would drift apart).
 * The vocabulary (V = 100) is padded to 64*tp, so with tp = 4 two ranks hold
 * no real vocabulary row at all. Exits 1 naming each failing tensor. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/model.h"
#include "../mpi_check.h"
#include "../test_rng.h"

#define TOL_LOSS 1e-5
#define TOL_GRAD 1e-4

static int g_rank = 0;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return h;
}

/* Logical (unpadded) flat index of global element g of t, or -1 for padding. */
static long long logical_index(const mt_tensor *t, size_t g) {
  if (t->ndim == 1) return (long long)g;
  size_t cols = (size_t)t->padded[1], row = g / cols, col = g % cols;
  if ((int64_t)row >= t->shape[0]) return -1;
  return (long long)(row * (size_t)t->shape[1] + col);
}

/* Same logical parameters in any layout: noise keyed by (name, logical index). */
static void perturb(mt_gpt *m) {
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    int is_ln = strstr(t->name, "ln") == t->name || strstr(t->name, ".ln") != NULL;
    int is_bias = strstr(t->name, ".bias") != NULL;
    uint64_t key = hash_str(t->name);
    for (size_t j = 0; j < t->numel_local; j++) {
      size_t g = mt_tensor_global_index(t, j, m->reg.tp_size);
      long long li = logical_index(t, g);
      double u = rng_hash_sym(key, li < 0 ? g + (1ULL << 40) : (uint64_t)li);
      float *p = m->params + t->offset + j;
      if (li < 0) *p = (float)(0.5 * u); /* garbage in the padding */
      else *p = (float)(is_ln ? (is_bias ? 0.1 * u : 1.0 + 0.2 * u) : is_bias ? 0.05 * u : 0.15 * u);
    }
  }
}

/* Every local parameter of m equals ref's at the same logical index. */
static void check_init(const char *tag, const mt_gpt *m, const mt_gpt *ref) {
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i], *rt = &ref->reg.t[i];
    for (size_t j = 0; j < t->numel_local; j++) {
      size_t g = mt_tensor_global_index(t, j, m->reg.tp_size);
      long long li = logical_index(t, g);
      float want = li < 0 ? 0.0f : ref->params[rt->offset + (size_t)li];
      if (m->params[t->offset + j] != want) {
        MT_FAIL("%s: init of %s local %zu (global %zu) is %g, unsplit %g", tag, t->name, j, g,
                m->params[t->offset + j], want);
        break;
      }
    }
  }
}

static void check_grads(const char *tag, const mt_gpt *m, const mt_gpt *ref) {
  double worst = 0.0;
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i], *rt = &ref->reg.t[i];
    double gmax = 0.0, emax = 0.0;
    for (size_t j = 0; j < rt->numel_local; j++) gmax = mt_worst(gmax, fabs(ref->grads[rt->offset + j]));
    int pad_bad = 0;
    for (size_t j = 0; j < t->numel_local; j++) {
      size_t g = mt_tensor_global_index(t, j, m->reg.tp_size);
      long long li = logical_index(t, g);
      float got = m->grads[t->offset + j];
      if (li < 0) {
        pad_bad |= got != 0.0f;
        continue;
      }
      emax = mt_worst(emax, fabs((double)got - ref->grads[rt->offset + (size_t)li]));
    }
    double rel = gmax > 0 ? emax / gmax : emax;
    worst = mt_worst(worst, rel);
    if (!(rel <= TOL_GRAD))
      MT_FAIL(
          "%s: gradient of %s differs from the unsplit model: max err %.3e, %.3e of its max "
          "|grad| %.3e",
          tag, t->name, emax, rel, gmax);
    if (pad_bad) MT_FAIL("%s: padding rows of %s got a non-zero gradient", tag, t->name);
  }
  if (g_rank == 0) printf("  %s: worst gradient error %.2e of the tensor's max\n", tag, worst);
}

/* Replicated tensors: the same gradient bits on every tp rank. */
static void check_replicated_identical(const char *tag, const mt_gpt *m, MPI_Comm comm) {
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    if (t->tp.kind != MT_PLACE_REPLICATED) continue;
    uint64_t h = 1469598103934665603ULL, hv[2];
    const unsigned char *b = (const unsigned char *)(m->grads + t->offset);
    for (size_t k = 0; k < t->numel_local * sizeof(float); k++) h = (h ^ b[k]) * 1099511628211ULL;
    hv[0] = h;
    hv[1] = ~h;
    MPI_Allreduce(MPI_IN_PLACE, hv, 2, MPI_UINT64_T, MPI_MAX, comm);
    if (hv[0] != h || hv[1] != ~h)
      MT_FAIL("%s: replicated tensor %s has different gradients on the tp ranks", tag, t->name);
  }
}

typedef struct {
  mt_gpt *m;
} hook_ctx;

/* the training loop's hook: sum the partial (sp) gradients of the layer */
static void hook(void *ctx, int layer) {
  mt_gpt *m = ((hook_ctx *)ctx)->m;
  mt_tp_reduce_partial_grads(&m->tp, &m->reg, m->grads, mt_gpt_layer_offset(m, layer),
                             mt_gpt_layer_offset(m, layer + 1));
}

static void run(mt_mesh *mesh, int sp) {
  char tag[64];
  snprintf(tag, sizeof tag, "tp=%d sp=%d", mesh->tp, sp);
  mt_model_shape s = {.n_layer = 3, .n_embd = 48, .n_head = 4, .seq_len = 16, .vocab = 100};
  mt_model_shape s1 = s, sn = s;
  s1.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  sn.vocab_padded = mt_model_pad_vocab(s.vocab, mesh->tp);
  const int B = 2, T = s.seq_len, BT = B * T;
  mt_err e = {0};
  mt_gpt ref, m;
  mt_gpt_parallel par = {.tp = &mesh->tp_g, .sp = sp, .cp_mode = MT_CP_RING};
  if (mt_gpt_create(&ref, &s1, mt_ops_cpu(), B, &e) != 0 ||
      mt_gpt_create_parallel(&m, &sn, mt_ops_cpu(), B, &par, &e) != 0) {
    MT_FAIL("%s: create: %s", tag, e.msg);
    return;
  }
  mt_gpt_init_params(&ref, 7);
  mt_gpt_init_params(&m, 7);
  check_init(tag, &m, &ref);
  perturb(&ref);
  perturb(&m);

  int *inp = malloc(2 * BT * sizeof(int)), *tgt = malloc(2 * BT * sizeof(int));
  for (int i = 0; i < 2 * BT; i++) {
    inp[i] = (int)(mt_splitmix64(1000 + i) % (uint64_t)s.vocab);
    tgt[i] = (int)(mt_splitmix64(5000 + i) % (uint64_t)s.vocab);
  }
  tgt[3] = s.vocab - 1; /* the highest real column, on the last rank holding real rows */
  const float dloss = 1.0f / (float)(2 * BT);
  hook_ctx hc = {&m};
  mt_gpt_zero_grad(&ref);
  mt_gpt_zero_grad(&m);
  for (int mb = 0; mb < 2; mb++) {
    float lr = mt_gpt_forward(&ref, inp + mb * BT, tgt + mb * BT, B);
    float lm = mt_gpt_forward(&m, inp + mb * BT, tgt + mb * BT, B);
    double rel = fabs((double)lm - lr) / fabs((double)lr);
    if (g_rank == 0) printf("  %s: micro-batch %d loss %.7f, unsplit %.7f, rel %.2e\n", tag, mb, lm, lr, rel);
    if (!(rel <= TOL_LOSS))
      MT_FAIL("%s: micro-batch %d loss %.8g vs unsplit %.8g", tag, mb, lm, lr);
    mt_gpt_backward(&ref, dloss, NULL, NULL);
    mt_gpt_backward(&m, dloss, mb == 1 ? hook : NULL, &hc);
  }
  check_grads(tag, &m, &ref);
  check_replicated_identical(tag, &m, mesh->tp_g.comm);
  /* a shorter batch than the buffers hold, as evaluation's last one */
  float lr = mt_gpt_forward(&ref, inp + 5, tgt + 5, 1), lm = mt_gpt_forward(&m, inp + 5, tgt + 5, 1);
  if (!(fabs((double)lm - lr) <= TOL_LOSS * fabs((double)lr)))
    MT_FAIL("%s: B = 1 loss %.8g vs unsplit %.8g", tag, lm, lr);
  free(inp);
  free(tgt);
  mt_gpt_destroy(&ref);
  mt_gpt_destroy(&m);
}

int main(int argc, char **argv) {
  int world = mt_mpi_test_begin(&argc, &argv, &g_rank);
  mt_mesh mesh;
  mt_err e = {0};
  if (world < 2 || mt_mesh_create(&mesh, world, 1, 1, 1, &e) != 0) {
    MT_FAIL("tp_grad_check: run on 2 or more ranks (%s)", e.msg);
    return mt_mpi_test_end("tp_grad_check");
  }
  if (g_rank == 0) printf("tp_grad_check: tp=%d\n", world);
  run(&mesh, 0);
  run(&mesh, 1);
  mt_mesh_destroy(&mesh);
  return mt_mpi_test_end("tp_grad_check");
}
