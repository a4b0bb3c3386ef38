/* The row gathers and the weighted combine of a MoE layer on bf16
 * activations (kernels.h, mt_ops_bf16); the router stays fp32 (mt_ops:
 * E columns per token, its logits converted with to_f32). The arithmetic of
 * moe_cpu.c in fp32 (experts' weights fp32, sums in the order j = 0..k-1),
 * one rounding per stored bf16 value. Split by token rows, schedule(static):
 * the same bits at any thread count. */
#include "kernels/cpu/bf16_internal.h"

#include <string.h>

void mt_cpu_gather_rows_bf16(mt_bf16 *out, const mt_bf16 *inp, const int *idx, int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++)
    memcpy(out + (size_t)i * C, inp + (size_t)idx[i] * C, (size_t)C * sizeof(mt_bf16));
}

/* out row n = round(sum over slots >= 0 of w y[slot]), fp32 in j order */
void mt_cpu_moe_combine_bf16(mt_bf16 *out, const mt_bf16 *y, const int *slot, const float *w,
                             int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    mt_bf16 *o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float acc = 0.0f;
      for (int j = 0; j < k; j++) {
        int s = slot[(size_t)n * k + j];
        if (s >= 0) acc += w[(size_t)n * k + j] * mt_bf16_to_f32(y[(size_t)s * C + c]);
      }
      o[c] = mt_bf16_from_f32(acc);
    }
  }
}

/* dy row slot = round(w dout row n) (WRITES); dw (N,k) fp32 = dot(dout, y row) */
void mt_cpu_moe_combine_backward_bf16(mt_bf16 *dy, float *dw, const mt_bf16 *dout,
                                      const mt_bf16 *y, const int *slot, const float *w, int N,
                                      int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const mt_bf16 *g = dout + (size_t)n * C;
    for (int j = 0; j < k; j++) {
      int s = slot[(size_t)n * k + j];
      if (s < 0) {
        dw[(size_t)n * k + j] = 0.0f;
        continue;
      }
      const mt_bf16 *yr = y + (size_t)s * C;
      mt_bf16 *dyr = dy + (size_t)s * C;
      float wj = w[(size_t)n * k + j], dot = 0.0f;
      for (int c = 0; c < C; c++) {
        float gc = mt_bf16_to_f32(g[c]);
        dyr[c] = mt_bf16_from_f32(wj * gc);
        dot += gc * mt_bf16_to_f32(yr[c]);
      }
      dw[(size_t)n * k + j] = dot;
    }
  }
}

/* dx row n = round(dx + the rows src[slot] of slots >= 0, fp32 in j order) */
void mt_cpu_moe_gather_sum_bf16(mt_bf16 *dx, const mt_bf16 *src, const int *slot, int N, int C,
                                int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    mt_bf16 *d = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float acc = mt_bf16_to_f32(d[c]);
      for (int j = 0; j < k; j++) {
        int s = slot[(size_t)n * k + j];
        if (s >= 0) acc += mt_bf16_to_f32(src[(size_t)s * C + c]);
      }
      d[c] = mt_bf16_from_f32(acc);
    }
  }
}
