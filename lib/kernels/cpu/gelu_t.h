/* Bodies of gelu.c, over the storage type T (typed.h). */

/* out = gelu(inp), n elements (bf16: looked up, gelu.c) */
void FN(gelu_forward)(void *out_, const void *inp_, size_t n) {
  T *out = out_;
  const T *inp = inp_;
#if IS_BF16
  gelu_bf16_ready();
  const mt_bf16 *value = g_gelu_bf16.value;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = value[inp[i]];
#else
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = gelu_value(inp[i]);
#endif
}

/* dinp += gelu'(inp) * dout (acc 0: dinp = 0 + that, the bits of a zeroed
 * dinp); bf16: gelu'(inp) looked up */
static void FN(gelu_bwd)(T *dinp, const T *inp, const T *dout, size_t n, int acc) {
#if IS_BF16
  gelu_bf16_ready();
  const float *slope = g_gelu_bf16.slope;
#define GELU_SLOPE(x) slope[x]
#else
#define GELU_SLOPE(x) gelu_slope(x)
#endif
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    dinp[i] = ST((acc ? LD(dinp[i]) : 0.0f) + GELU_SLOPE(inp[i]) * LD(dout[i]));
#undef GELU_SLOPE
}

void FN(gelu_backward)(void *dinp, const void *inp, const void *dout, size_t n) {
  FN(gelu_bwd)(dinp, inp, dout, n, 1);
}

void FN(gelu_backward_first)(void *dinp, const void *inp, const void *dout, size_t n) {
  FN(gelu_bwd)(dinp, inp, dout, n, 0);
}

/* SwiGLU: out (N,F) = silu(gate) * up, inp (N,2F) rows gate | up (bf16:
 * silu looked up, gelu.c) */
void FN(swiglu_forward)(void *out_, const void *inp_, int N, int F) {
  T *out = out_;
  const T *inp = inp_;
#if IS_BF16
  swiglu_bf16_ready();
  const float *silu = g_swiglu_bf16.silu;
#define SILU(gb) silu[gb]
#else
#define SILU(g) ((g) / (1.0f + mt_exp_poly(-(g))))
#endif
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *gate = inp + (size_t)n * 2 * F, *up = gate + F;
    T *y = out + (size_t)n * F;
#pragma omp simd
    for (int f = 0; f < F; f++) y[f] = ST(SILU(gate[f]) * LD(up[f]));
  }
#undef SILU
}

/* with s = sigmoid(gate): silu = gate s, silu' = s (1 + gate (1 - s));
 * dgate += dout up silu', dup += dout silu (acc 0: = 0 + those); bf16: s
 * and 1 + gate (1 - s) looked up */
static void FN(swiglu_bwd)(T *dinp, const T *inp, const T *dout, int N, int F, int acc) {
#if IS_BF16
  swiglu_bf16_ready();
  const float *sig = g_swiglu_bf16.sig, *fac = g_swiglu_bf16.fac;
#define SIG(gb, g) sig[gb]
#define FAC(gb, g, s) fac[gb]
#else
#define SIG(gb, g) (1.0f / (1.0f + mt_exp_poly(-(g))))
#define FAC(gb, g, s) (1.0f + (g) * (1.0f - (s)))
#endif
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *gate = inp + (size_t)n * 2 * F, *up = gate + F, *dy = dout + (size_t)n * F;
    T *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      float g = LD(gate[f]), s = SIG(gate[f], g), d = LD(dy[f]);
      dgate[f] = ST((acc ? LD(dgate[f]) : 0.0f) + d * LD(up[f]) * s * FAC(gate[f], g, s));
      dup[f] = ST((acc ? LD(dup[f]) : 0.0f) + d * g * s);
    }
  }
#undef SIG
#undef FAC
}

void FN(swiglu_backward)(void *dinp, const void *inp, const void *dout, int N, int F) {
  FN(swiglu_bwd)(dinp, inp, dout, N, F, 1);
}

void FN(swiglu_backward_first)(void *dinp, const void *inp, const void *dout, int N, int F) {
  FN(swiglu_bwd)(dinp, inp, dout, N, F, 0);
}
