/* The Mixture-of-Experts router on the CPU, in fp32 whatever the storage
 * type (kernels.h's MT_OPS_FIXED): softmax, top-k, renormalised weights,
 * and its backward with the load-balancing and z-loss terms; the sums of
 * the probabilities per sequence. (The token movement over the storage
 * type: moe.c.)
 *
 * Determinism: every loop is split by rows (tokens) with schedule(static),
 * each row computed by one thread in a fixed order (experts, then the k
 * choices in order), so the results are the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

void mt_cpu_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                               const float *logits, const float *bias, int N, int E, int k,
                               int sigmoid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * E;
    float *p = probs + (size_t)n * E;
    float maxv = x[0];
    for (int e = 1; e < E; e++) maxv = x[e] > maxv ? x[e] : maxv;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
      p[e] = expf(x[e] - maxv);
      sum += p[e];
    }
    /* softmax, or each expert's own sigmoid score (DeepSeek-V3) */
    float inv = 1.0f / sum;
    for (int e = 0; e < E; e++) p[e] = sigmoid ? 1.0f / (1.0f + expf(-x[e])) : p[e] * inv;
    lse[n] = maxv + logf(sum);
    /* top-k by selection on p + bias: the largest not yet taken, the lower
     * index on ties */
    int *idx = top_idx + (size_t)n * k;
    float *w = top_w + (size_t)n * k, chosen = 0.0f;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float best_v = 0.0f;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int i = 0; i < j; i++) taken |= idx[i] == e;
        /* a masked expert (probability 0: a -inf logit) never wins by its bias */
        float v = bias ? (p[e] > 0.0f ? p[e] + bias[e] : -INFINITY) : p[e];
        if (!taken && (best < 0 || v > best_v)) best = e, best_v = v;
      }
      idx[j] = best;
      w[j] = p[best];
      chosen += p[best];
    }
    float inv_chosen = 1.0f / chosen;
    for (int j = 0; j < k; j++) w[j] *= inv_chosen;
  }
}

/* With S = the sum of the chosen probabilities (or scores), top_w[j] = p[i_j] / S, so
 *   dL/dp[i_j] = (dtop_w[j] - sum_l dtop_w[l] top_w[l]) / S,
 * plus aux_grad's dL/dp; then the softmax: dlogit[e] = p[e] (dp[e] -
 * sum_e' p[e'] dp[e']); plus the z-loss's z_grad * lse * p[e]. The sigmoid
 * router: dlogit[e] = p[e] (1 - p[e]) dp[e] (no z-loss: its z_grad is not
 * applied). */
void mt_cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                const int *top_idx, const float *top_w, const float *dtop_w,
                                const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                int E, int k, int sigmoid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * E;
    const int *idx = top_idx + (size_t)n * k;
    const float *w = top_w + (size_t)n * k, *dw = dtop_w + (size_t)n * k;
    const float *aux = aux_grad ? aux_grad + (size_t)(n / rows_per_seq) * E : NULL;
    float *d = dlogits + (size_t)n * E;
    float chosen = 0.0f, wdw = 0.0f;
    for (int j = 0; j < k; j++) {
      chosen += p[idx[j]];
      wdw += w[j] * dw[j];
    }
    /* dp[e] = aux[e] + (e chosen as j ? (dw[j] - wdw) / chosen : 0) */
    float dot = 0.0f;
    for (int e = 0; e < E; e++) {
      float dp = aux ? aux[e] : 0.0f;
      for (int j = 0; j < k; j++)
        if (idx[j] == e) dp += (dw[j] - wdw) / chosen;
      d[e] = dp;
      dot += p[e] * dp;
    }
    float z = z_grad * lse[n];
    if (sigmoid) /* each score its own logit's: ds/dx = s (1 - s) */
      for (int e = 0; e < E; e++) d[e] = p[e] * (1.0f - p[e]) * d[e];
    else
      for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - dot) + z * p[e];
  }
}

void mt_cpu_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {
  int S = N / rows_per_seq;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < S; s++) {
    float *out = sums + (size_t)s * E;
    for (int e = 0; e < E; e++) out[e] = 0.0f;
    for (int r = 0; r < rows_per_seq; r++) {
      const float *p = probs + ((size_t)s * rows_per_seq + r) * E;
      for (int e = 0; e < E; e++) out[e] += p[e];
    }
  }
}
