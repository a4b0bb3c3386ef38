/* What the GPU comparisons (gpu_ops, gpu_ops_bf16, gpu_moe_ops, gpu_edges,
 * gpu_attn_bf16) share: the two op tables (the CPU's and the CUDA backend's;
 * each op takes the storage type, F32 or BF16 below, of its operands),
 * their random inputs (urand, rnd, rnd_bf16, rnd_t over tests/test_rng.h's
 * generator, which each program seeds), copies between host and device,
 * the comparison that reports one line per check (max |gpu - cpu| /
 * max |cpu|; NaN fails) and counts failures, the encoder's checks at either
 * storage type (encoder_check), and the start and end of main
 * (gpu_compare_start, gpu_compare_finish).
 * Include once, from the program's one source file. */
#ifndef MT_TESTS_GPU_COMPARE_H
#define MT_TESTS_GPU_COMPARE_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_ops *cpu, *gpu;
/* the storage types of the ops' operands */
#define F32 MT_DT_F32
#define BF16 MT_DT_BF16

/* n uniform values in [lo, hi) (urand's), rounded to bf16 */
static inline mt_bf16 *rnd_bf16(size_t n, float lo, float hi) {
  mt_bf16 *x = malloc((n ? n : 1) * sizeof(mt_bf16));
  for (size_t i = 0; i < n; i++) x[i] = mt_bf16_from_f32(urand(lo, hi));
  return x;
}

/* n uniform values in [lo, hi) of storage type t (rnd's or rnd_bf16's draws) */
static inline void *rnd_t(mt_dtype t, size_t n, float lo, float hi) {
  return t == BF16 ? (void *)rnd_bf16(n, lo, hi) : (void *)rnd(n, lo, hi);
}

/* device copies of n elements of `size` bytes */
static inline void *dev_copy(const void *h, size_t n, size_t size) {
  void *d = gpu->alloc(MT_MEM_OTHER, (n ? n : 1) * size);
  gpu->upload(d, h, n * size);
  return d;
}
static inline void *dev_bytes(const void *h, size_t bytes) { return dev_copy(h, bytes, 1); }
static inline float *dev(const float *h, size_t n) { return dev_copy(h, n, sizeof(float)); }
static inline int *devi(const int *h, size_t n) { return dev_copy(h, n, sizeof(int)); }
static inline mt_bf16 *devb(const mt_bf16 *h, size_t n) { return dev_copy(h, n, sizeof(mt_bf16)); }
static inline void dfree(void *d, size_t bytes) { gpu->free(MT_MEM_OTHER, d, bytes ? bytes : 1); }

/* host copies (free them): of device d, and of host x */
static inline void *host_bytes(const void *d, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  gpu->download(h, d, bytes);
  return h;
}
static inline void *dup_bytes(const void *x, size_t bytes) {
  void *y = malloc(bytes ? bytes : 1);
  memcpy(y, x, bytes);
  return y;
}

/* 1 when device d holds the bytes of host h */
static inline int same_bytes(const void *h, const void *d, size_t bytes) {
  void *x = host_bytes(d, bytes);
  int same = !memcmp(h, x, bytes);
  free(x);
  return same;
}

/* max |gpu - ref| / max |ref| with the GPU tensor downloaded (NaN stays) */
static inline double err_of(const float *ref, const float *d, size_t n) {
  float *h = host_bytes(d, n * sizeof(float));
  double err = mt_max_rel_err(h, ref, n);
  free(h);
  return err;
}
#define CMP(what, ref, d, n, tol) mt_check_err(what, err_of(ref, d, n), tol)

/* an attention LSE (device d against host ref): finite rows relative to
 * max(1, |ref|), -inf rows must be -inf on both sides */
static inline double lse_err_of(const float *ref, const float *d, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof(float));
  gpu->download(h, d, n * sizeof(float));
  double diff = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (isinf(ref[i]) || isinf(h[i])) {
      if (!(ref[i] == h[i])) diff = mt_worst(diff, INFINITY);
      continue;
    }
    diff = mt_worst(diff, fabs((double)h[i] - (double)ref[i]) / fmax(1.0, fabs(ref[i])));
  }
  free(h);
  return diff;
}

/* One pair (query block, key block) of block attention. Queries: Tq rows
 * from row qrow of a (B, Tl, 3C) q|k|v buffer. Keys and values: Tk rows from
 * row krow of the same buffer (Tkv = 0, as the model's own block) or of a
 * (B, Tkv, 2C) k|v buffer (as the ring passes them). out (B, Tl, C), lse
 * (B, NH, Tl) at row qrow, as context parallelism lays them out. */
typedef struct {
  const char *name;
  int B, NH, hs;
  int Tl, Tkv;
  int qrow, Tq, q_pos0;
  int krow, Tk, k_pos0;
  int causal;
  int doc; /* > 0: documents of doc positions (shifted 5 per sequence) */
} attn_pair;

/* pair p's documents: where each query row's document begins (B, Tq),
 * malloc'd; NULL without documents */
static inline int *attn_doc_lo(const attn_pair *p) {
  if (p->doc <= 0) return NULL;
  int *lo = (int *)malloc((size_t)p->B * p->Tq * sizeof(int));
  for (int b = 0; b < p->B; b++)
    for (int i = 0; i < p->Tq; i++) {
      int pos = p->q_pos0 + i, first = pos - (pos + 5 * b) % p->doc;
      lo[(size_t)b * p->Tq + i] = first < 0 ? 0 : first;
    }
  return lo;
}

/* block a with its documents' starts at lo (the device's copy) */
static inline mt_attn_block attn_on(const mt_attn_block *a, const int *lo) {
  mt_attn_block d = *a;
  d.q_lo = a->q_lo ? lo : NULL;
  return d;
}

/* a pair's block and buffers, in elements */
typedef struct {
  mt_attn_block a;
  int fused;                        /* keys and values in the q|k|v buffer */
  size_t C, krs;                    /* channels; row stride of the keys' buffer */
  size_t n_qkv, n_kv, n_out, n_lse; /* buffer sizes (n_kv = 0 when fused) */
  size_t qo, oo, lo, ko, vo;        /* the block's first element of q, out, lse, k, v */
} attn_layout;

/* the layout of pair p (printed as one line) */
static inline attn_layout attn_layout_of(const attn_pair *p) {
  attn_layout L;
  const int B = p->B, NH = p->NH, hs = p->hs, Tl = p->Tl;
  L.fused = p->Tkv == 0;
  const int Tkv = L.fused ? Tl : p->Tkv;
  const size_t C = (size_t)NH * hs, krs = L.fused ? 3 * C : 2 * C;
  printf("attn %s: B=%d NH=%d hs=%d Tq=%d Tk=%d q_pos0=%d k_pos0=%d %s, %s, documents %d\n",
         p->name, B, NH, hs, p->Tq, p->Tk, p->q_pos0, p->k_pos0,
         p->causal ? "causal" : "not causal", L.fused ? "fused q|k|v" : "k|v buffer", p->doc);
  L.C = C, L.krs = krs;
  L.n_qkv = (size_t)B * Tl * 3 * C, L.n_kv = L.fused ? 0 : (size_t)B * Tkv * 2 * C;
  L.n_out = (size_t)B * Tl * C, L.n_lse = (size_t)B * NH * Tl;
  L.a = (mt_attn_block){B, NH, hs, p->Tq, p->Tk, p->q_pos0, p->k_pos0, p->causal,
                        (size_t)Tl * 3 * C, 3 * C, (size_t)Tkv * krs, krs, (size_t)Tkv * krs, krs,
                        (size_t)Tl * C, C, (size_t)NH * Tl, (size_t)Tl, NULL, (size_t)p->Tq, 0.0};
  L.qo = (size_t)p->qrow * 3 * C, L.oo = (size_t)p->qrow * C, L.lo = (size_t)p->qrow;
  L.ko = (size_t)p->krow * krs + (L.fused ? C : 0), L.vo = L.ko + C;
  return L;
}

/* The CUDA backend for program `prog` at the precision argv[1] names
 * (fp32 | bf16): 0, gpu set; 77 (print "SKIP: ...") where no GPU is
 * visible; 1 when it cannot start. */
static inline int gpu_compare_open(const char *prog, int bf16) {
  char why[256];
  if (mt_cuda_device_count(why, sizeof why) < 1) {
    printf("SKIP: no GPU visible: %s\n", why);
    return 77;
  }
  mt_err e = {0};
  if (mt_cuda_init(0, bf16 ? MT_PRECISION_BF16 : MT_PRECISION_FP32, &e) != 0) {
    fprintf(stderr, "FAIL: %s\n", e.msg);
    return 1;
  }
  gpu = mt_ops_cuda();
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  printf("%s: %s, precision %s, matmuls %s, scratch %.1f MiB\n", prog, info.name,
         bf16 ? "bf16" : "fp32", info.gemm_path, info.workspace_bytes / 1048576.0);
  return 0;
}

/* a program's check that device tensor d equals host ref (n elements of
 * the storage type under test) */
typedef void (*cmp_exact_fn)(const char *what, const void *ref, const void *d, size_t n);

/* The embeddings (encoder) on storage type t against the CPU's, all exact
 * (out by `exact`; the fp32 gradients summed in the CPU's order): whole, and
 * vocabulary-parallel (rows [v0, v0 + Vl)) without positions, with
 * positions by row, and at given positions that repeat (documents) */
static inline void encoder_check(mt_dtype t, cmp_exact_fn exact, int B, int T, int C, int V,
                                 int Vp) {
  printf("encoder B=%d T=%d C=%d Vp=%d\n", B, T, C, Vp);
  const size_t es = mt_dtype_bytes(t);
  size_t BT = (size_t)B * T, n = BT * C, nte = (size_t)Vp * C, npe = (size_t)T * C;
  int *inp = malloc(BT * sizeof(int));
  for (size_t i = 0; i < BT; i++) inp[i] = (int)(urand(0, 1) * (V / 3)); /* many repeats */
  char *wte = rnd_t(t, nte, -1, 1), *wpe = rnd_t(t, npe, -1, 1), *out = rnd_t(t, n, -1, 1);
  void *dout = rnd_t(t, n, -1, 1);
  float *dwte = rnd(nte, -1, 1), *dwpe = rnd(npe, -1, 1);
  int *d_inp = devi(inp, BT);
  char *d_wte = dev_copy(wte, nte, es), *d_wpe = dev_copy(wpe, npe, es);
  void *d_out = dev_copy(out, n, es), *d_dout = dev_copy(dout, n, es);
  float *d_dwte = dev(dwte, nte), *d_dwpe = dev(dwpe, npe);
  cpu->encoder_forward(t, out, inp, wte, wpe, B, T, C);
  gpu->encoder_forward(t, d_out, d_inp, d_wte, d_wpe, B, T, C);
  exact("encoder_forward", out, d_out, n);
  cpu->encoder_backward(t, dwte, dwpe, dout, inp, B, T, C);
  gpu->encoder_backward(t, d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
  CMP("encoder_backward dwte (the CPU's order: exact)", dwte, d_dwte, nte, 0.0);
  CMP("encoder_backward dwpe (exact)", dwpe, d_dwpe, npe, 0.0);
  int v0 = V / 4, Vl = V / 3;
  int *pos = malloc(BT * sizeof(int));
  for (size_t i = 0; i < BT; i++) pos[i] = (int)(i % (size_t)T) % 7;
  int *d_pos = devi(pos, BT);
  for (int with_wpe = 0; with_wpe < 3; with_wpe++) {
    char what[96];
    const int *p = with_wpe == 2 ? pos : NULL, *d_p = with_wpe == 2 ? d_pos : NULL;
    cpu->encoder_vp_forward(t, out, inp, wte + (size_t)v0 * C * es, v0, Vl,
                            with_wpe ? wpe : NULL, p, B, T, C);
    gpu->encoder_vp_forward(t, d_out, d_inp, d_wte + (size_t)v0 * C * es, v0, Vl,
                            with_wpe ? d_wpe : NULL, d_p, B, T, C);
    snprintf(what, sizeof what, "encoder_vp_forward v0=%d Vl=%d wpe %d", v0, Vl, with_wpe);
    exact(what, out, d_out, n);
    cpu->encoder_vp_backward(t, dwte, with_wpe ? dwpe : NULL, dout, inp, p, v0, Vl, B, T, C);
    gpu->encoder_vp_backward(t, d_dwte, with_wpe ? d_dwpe : NULL, d_dout, d_inp, d_p, v0, Vl, B,
                             T, C);
    snprintf(what, sizeof what, "encoder_vp_backward dwte wpe %d (exact)", with_wpe);
    CMP(what, dwte, d_dwte, nte, 0.0);
    CMP("encoder_vp_backward dwpe (exact)", dwpe, d_dwpe, npe, 0.0);
  }
  dfree(d_inp, BT * 4), dfree(d_wte, nte * es), dfree(d_wpe, npe * es), dfree(d_out, n * es);
  dfree(d_dout, n * es), dfree(d_dwte, nte * 4), dfree(d_dwpe, npe * 4), dfree(d_pos, BT * 4);
  free(inp), free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(pos);
}

/* Grouped-query attention's key/value spread both ways on storage type t
 * against the CPU's, exact (`exact`): 12 query heads of 24 channels over 4
 * key/value heads held whole by each of 3 ranks (rank 1: h0 = 4, a window
 * that cuts two groups and leaves two heads unused), with q in the layouts
 * and without (ring cp's compact K|V); dc starts as garbage (written, not
 * accumulated); the backward's sums in fp32 in head order, rounded once,
 * on both sides */
static inline void kv_spread_check(mt_dtype t, cmp_exact_fn exact) {
  const int nh = 4, nkv = 4, hs = 24, h0 = 4, group = 3;
  const size_t es = mt_dtype_bytes(t);
  for (int with_q = 1; with_q >= 0; with_q--) {
    printf("kv_spread with_q %d\n", with_q);
    const size_t rows = 333, nq = rows * (with_q ? 3 : 2) * nh * hs;
    const size_t nc = rows * ((with_q ? nh : 0) + 2 * nkv) * hs;
    void *c = rnd_t(t, nc, -1, 1), *qkv = rnd_t(t, nq, -1, 1), *dqkv = rnd_t(t, nq, -1, 1);
    void *dc = rnd_t(t, nc, -1, 1);
    void *d_c = dev_copy(c, nc, es), *d_qkv = dev_copy(qkv, nq, es);
    void *d_dqkv = dev_copy(dqkv, nq, es), *d_dc = dev_copy(dc, nc, es);
    cpu->kv_spread(t, qkv, c, rows, nh, nkv, hs, h0, group, with_q, NULL, NULL, 0);
    gpu->kv_spread(t, d_qkv, d_c, rows, nh, nkv, hs, h0, group, with_q, NULL, NULL, 0);
    exact("kv_spread", qkv, d_qkv, nq);
    cpu->kv_spread_backward(t, dc, dqkv, rows, nh, nkv, hs, h0, group, with_q, NULL, NULL, 0);
    gpu->kv_spread_backward(t, d_dc, d_dqkv, rows, nh, nkv, hs, h0, group, with_q, NULL, NULL,
                            0);
    exact("kv_spread_backward", dc, d_dc, nc);
    dfree(d_c, nc * es), dfree(d_qkv, nq * es), dfree(d_dqkv, nq * es), dfree(d_dc, nc * es);
    free(c), free(qkv), free(dqkv), free(dc);
  }
}

/* The start every comparison's main shares: MPI and the log up, g_rng
 * seeded, the CPU table, then the CUDA backend at the precision argv[1]
 * names ("bf16", else fp32; *bf16 says which). Returns 0 when ready;
 * otherwise MPI is finalized already and main returns the code (77: no GPU,
 * a skip). */
static inline int gpu_compare_start(int *argc, char ***argv, const char *prog, uint64_t seed,
                                    int *bf16) {
  MPI_Init(argc, argv);
  mt_log_init(0);
  *bf16 = *argc > 1 && !strcmp((*argv)[1], "bf16");
  g_rng = seed;
  cpu = mt_ops_cpu();
  int rc = gpu_compare_open(prog, *bf16);
  if (rc != 0) MPI_Finalize();
  return rc;
}

/* The end of main after gpu_compare_start: the backend shut down, MPI
 * finalized, the checks' summary as the exit code. */
static inline int gpu_compare_finish(const char *prog) {
  mt_cuda_shutdown();
  MPI_Finalize();
  return mt_check_summary(prog);
}

#endif
