/* kernels: one op table for every compute op of the model and optimizer.
 * A backend (cpu/ today, cuda/ later) fills an mt_ops; the model only ever
 * calls through it, so a new backend slots in without touching model code.
 * Knows nothing of MPI. All tensors are fp32, row-major, contiguous unless a
 * stride is given. B = batch, T = sequence, C = channels, NH = heads,
 * OC = output channels, V = true vocab, Vp = padded vocab (Vp >= V).
 * Backward ops ACCUMULATE (+=) into parameter gradients and into input
 * gradients, so gradient accumulation over micro-batches is free. */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>

typedef struct mt_ops {
  const char *name;

  /* out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) token ids < V; wte (Vp,C), wpe (T_max,C) */
  void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe,
                          int B, int T, int C);
  void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp,
                           int B, int T, int C);

  /* out (N,C) = layernorm(inp (N,C)) * w + b; saves mean (N) and rstd (N) */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C);
  void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C);

  /* out (N,OC) = inp (N,C) @ w^T + bias; w (OC,C); bias (OC) or NULL */
  void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                         int N, int C, int OC);
  void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, int N, int C, int OC);

  /* Causal self-attention. qkv (B,T,3C) holds q|k|v, each (NH heads of hs=C/NH);
   * out (B,T,C); att (B,NH,T,T) saves the softmax probabilities for backward.
   * dqkv (B,T,3C) is accumulated; datt is scratch of att's size. */
  void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                            int NH);
  void (*attention_backward)(float *dqkv, float *datt, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);

  /* GELU, tanh approximation, elementwise over n */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = a + b, elementwise */
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);

  /* Cross-entropy over the true vocab V of logits (N,Vp); columns V..Vp-1 are
   * padding and never receive probability. Writes losses (N) per position.
   * In place: probs may alias logits (it is overwritten by softmax). */
  void (*softmax_xent_forward)(float *losses, float *probs, const float *logits,
                               const int *targets, int N, int V, int Vp);
  /* dlogits (N,Vp) = (probs - onehot) * dloss for columns < V, 0 for padding.
   * dloss is the same scale for every position (e.g. 1/(global tokens)).
   * dlogits may alias probs. */
  void (*softmax_xent_backward)(float *dlogits, const float *probs, const int *targets,
                                float dloss, int N, int V, int Vp);

  /* AdamW on n contiguous elements; t = step count after this update (>= 1) */
  void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       int t);

  /* sum of squares of x[0..n), accumulated in double, deterministic order */
  double (*sumsq)(const float *x, size_t n);
  /* x *= s */
  void (*scale)(float *x, float s, size_t n);
} mt_ops;

const mt_ops *mt_ops_cpu(void);

/* Set the number of compute threads for OpenMP loops and BLAS (<=0: leave). */
void mt_kernels_set_threads(int n);
int mt_kernels_threads(void);
/* the BLAS library's name for the kernels it selected (e.g. "Haswell") */
const char *mt_kernels_blas_core(void);

/* Best sgemm GFLOP/s for n x n x n on this rank's threads over at least
 * min_seconds (the CPU "peak" when a hardware profile gives none). */
double mt_cpu_sgemm_gflops(int n, double min_seconds);

#endif
