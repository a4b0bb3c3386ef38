/* Bodies of xent.c, over the storage type T (typed.h). */

/* the n values of row x in fp32: x itself (float), or widened into buf */
static inline const float *FN(row_f32)(float *buf, const T *x, int n) {
#if IS_BF16
  mt_bf16_to_f32_serial(buf, x, (size_t)(n > 0 ? n : 0));
  return buf;
#else
  (void)buf, (void)n;
  return x;
#endif
}

/* this thread's fp32 row of n floats */
static inline float *FN(row_buf)(int n) {
  return mt_cpu_scratch(MT_XENT_ROW_SLOT, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

/* p[j] = e[j] / sum on the n real columns, 0 on the padding up to width;
 * e may be p itself (float) */
static inline void FN(row_normalise)(T *p, const float *e, double sum, int n, int width) {
  float inv = (float)(1.0 / sum);
  for (int j = 0; j < n; j++) p[j] = ST(e[j] * inv);
  for (int j = n > 0 ? n : 0; j < width; j++) p[j] = ST(0.0f);
}

/* probs may alias logits: the target's logit and the maximum are read
 * before the row is overwritten, and each exp is written over its own
 * input (float: in probs; bf16: in the widened row, then rounded); an
 * ignored target's loss is 0 (its probabilities as any row's) */
void FN(softmax_xent_forward)(float *losses, void *probs_, const void *logits_,
                              const int *targets, int N, int V, int Vp) {
  T *probs = probs_;
  const T *logits = logits_;
#pragma omp parallel
  {
    float *row = IS_BF16 ? FN(row_buf)(V) : NULL;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      T *p = probs + (size_t)n * Vp;
      const float *l = FN(row_f32)(row, logits + (size_t)n * Vp, V);
      float *e = IS_BF16 ? row : (float *)p;
      int ignored = targets[n] == MT_TARGET_IGNORE;
      float maxv = mt_cpu_row_max(l, V), l_target = ignored ? 0.0f : l[targets[n]];
      double sum = mt_cpu_row_exp_f64(e, l, V, maxv);
      FN(row_normalise)(p, e, sum, V, Vp);
      losses[n] = ignored ? 0.0f : (float)(log(sum) + (double)maxv - (double)l_target);
    }
  }
}

/* dlogits (N,Vp) = (probs - onehot(target)) * dloss on columns < V, 0 on the
 * padding. WRITES (=) rather than accumulates: dlogits may alias probs, and
 * the logits are an activation, not a parameter. */
void FN(softmax_xent_backward)(void *dlogits, const void *probs, const int *targets,
                               float dloss, int N, int V, int Vp) {
  FN(xent_vp_backward)(dlogits, probs, targets, 0, dloss, N, Vp, V);
}

/* Vocabulary-parallel cross-entropy: softmax_xent_forward's three passes
 * (max, exp and sum, normalise), cut where the statistics of a row must be
 * combined over the ranks that share the vocabulary. The arithmetic is
 * softmax_xent's, so one rank holding the whole vocabulary gets its bits. */
void FN(xent_vp_max)(float *rowmax, const void *logits_, int N, int Vl, int nvalid) {
  const T *logits = logits_;
#pragma omp parallel
  {
    float *row = IS_BF16 ? FN(row_buf)(nvalid) : NULL;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float *l = FN(row_f32)(row, logits + (size_t)n * Vl, nvalid);
      rowmax[n] = nvalid > 0 ? mt_cpu_row_max(l, nvalid) : -INFINITY;
    }
  }
}

/* stats[n] = {sum of exp(logit - M) over the real local columns, the
 * target's logit if held here else 0 (an ignored target, -1, is held
 * nowhere: col < 0 for any v0 >= 0)}; the logits are left as they are
 * (the exps go to the thread's row) */
void FN(xent_vp_exp)(double *stats, const void *logits_, const float *rowmax,
                     const int *targets, int v0, int N, int Vl, int nvalid) {
  const T *logits = logits_;
#pragma omp parallel
  {
    float *row = FN(row_buf)(nvalid);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const T *lt = logits + (size_t)n * Vl;
      int col = targets[n] - v0;
      double l_target = col >= 0 && col < nvalid ? (double)LD(lt[col]) : 0.0;
      double sum = 0.0;
      if (nvalid > 0)
        sum = mt_cpu_row_exp_f64(row, FN(row_f32)(row, lt, nvalid), nvalid, rowmax[n]);
      stats[2 * (size_t)n] = sum;
      stats[2 * (size_t)n + 1] = l_target;
    }
  }
}

/* probs = exp(logit - M) / sum, recomputed from the logits (the same exps
 * as xent_vp_exp's), 0 on padding; probs may alias logits; the loss of an
 * ignored target 0 */
void FN(xent_vp_finish)(float *losses, void *probs_, const void *logits_, const double *stats,
                        const float *rowmax, const int *targets, int N, int Vl, int nvalid) {
  T *probs = probs_;
  const T *logits = logits_;
#pragma omp parallel
  {
    float *row = IS_BF16 ? FN(row_buf)(nvalid) : NULL;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      double sum = stats[2 * (size_t)n];
      T *p = probs + (size_t)n * Vl;
      float *e = IS_BF16 ? row : (float *)p;
      if (nvalid > 0) {
        const float *l = FN(row_f32)(row, logits + (size_t)n * Vl, nvalid);
        mt_cpu_row_exp(e, l, nvalid, rowmax[n]);
      }
      FN(row_normalise)(p, e, sum, nvalid, Vl);
      losses[n] = targets[n] == MT_TARGET_IGNORE
                      ? 0.0f
                      : (float)(log(sum) + (double)rowmax[n] - stats[2 * (size_t)n + 1]);
    }
  }
}

/* dlogits (N,Vl) = (probs - onehot(target - v0)) * dloss on real columns, 0
 * on padding, and 0 on the whole row of an ignored target; WRITES, may
 * alias probs */
void FN(xent_vp_backward)(void *dlogits_, const void *probs_, const int *targets, int v0,
                          float dloss, int N, int Vl, int nvalid) {
  T *dlogits = dlogits_;
  const T *probs = probs_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *p = probs + (size_t)n * Vl;
    T *d = dlogits + (size_t)n * Vl;
    int col = targets[n] - v0;
    int real = targets[n] == MT_TARGET_IGNORE ? 0 : nvalid > 0 ? nvalid : 0;
    int held = col >= 0 && col < real;
    /* the target's column apart, read before the row is overwritten (d may
     * be p): the others are p - 0 = p exactly, so the loop is one multiply
     * and vectorises (an aliasing row is read and written element by
     * element, each read before its own write) */
    float p_target = held ? LD(p[col]) : 0.0f;
#pragma omp simd
    for (int j = 0; j < real; j++) d[j] = ST(LD(p[j]) * dloss);
    if (held) d[col] = ST((p_target - 1.0f) * dloss);
    for (int j = real; j < Vl; j++) d[j] = ST(0.0f);
  }
}
