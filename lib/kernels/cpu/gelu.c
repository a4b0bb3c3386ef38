/* The MLP's activations on the CPU, GELU (tanh approximation) and SwiGLU,
 * over the storage type (bodies in gelu_t.h, instantiated for float and
 * bf16 by typed.h), vectorised.
 * libm's tanhf is a scalar call and was a quarter of a training step; here
 * tanh comes from a polynomial exp that the compiler turns into AVX
 * instructions. This file is compiled with -ffinite-math-only and
 * -fno-trapping-math (see CMakeLists.txt) so that the clamps (fminf/fmaxf)
 * vectorise; it never sees infinities or NaNs from a healthy model, and the
 * results are the same bits on every run (the rounding to bf16 is integer
 * arithmetic and keeps NaN whatever the flags).
 * GELU on bf16 storage looks its values up: a bf16 input is one of 65536,
 * so a table holds, for each, the rounded GELU and the fp32 slope gelu'(x)
 * that the fp32 arithmetic gives (filled once per process by the same
 * functions as the fp32 loops, which compile without FMA contraction in
 * ISO C, so the bits are the same), and a pass loads from tables (384 KiB
 * in all) that stay in cache, where the polynomial, the clamps and the
 * division made GELU 4% of a gpt2-124m step (tests/unit/test_fused.c
 * holds the tables against the fp32 op at every bf16 value). SwiGLU's
 * gate on bf16 looks up its factors the same way (3.3-3.5% of a
 * llama-124m step before). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/exp_poly.h"

/* sqrt(2/pi) */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

/* tanh(u) = (e^{2u} - 1) / (e^{2u} + 1); beyond |u| = 9 it is +-1 in fp32.
 * Absolute error below 3e-7, which is what 0.5 x (1 + tanh) needs. */
static inline float fast_tanhf(float u) {
  u = fminf(fmaxf(u, -9.0f), 9.0f);
  float e = mt_exp_poly(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

/* gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 */
static inline float gelu_value(float x) {
  return 0.5f * x * (1.0f + fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x)));
}

/* with u = sqrt(2/pi)(x + 0.044715 x^3):
 * gelu'(x) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3*0.044715 x^2) */
static inline float gelu_slope(float x) {
  float th = fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
}

/* bf16 bits i: a NaN (an integer test: x != x folds away under
 * -ffinite-math-only), and the quiet NaN the tables give for one */
static int bits_nan(uint32_t i) { return (i & 0x7fffu) > 0x7f80u; }
static float nan_of_bits(uint32_t i) {
  union {
    uint32_t u;
    float f;
  } nan = {(i << 16) | 0x00400000u};
  return nan.f;
}

/* A table fill: entry(i, x) for every bf16 input's bits i and value x,
 * entry_nan(i) in a NaN's place (mt_exp_poly's conversion of a NaN to an
 * integer is undefined: UBSan). Once per process, so a call an entry. */
static void fill_every_bf16(void (*entry)(uint32_t i, float x), void (*entry_nan)(uint32_t i)) {
  for (uint32_t i = 0; i < (1u << 16); i++)
    if (bits_nan(i)) entry_nan(i);
    else entry(i, mt_bf16_to_f32((mt_bf16)i));
}

/* Every bf16 input's GELU (rounded to bf16) and slope (fp32), indexed by
 * the input's bits; a NaN input gives a NaN (the arithmetic's result for
 * one is left to -ffinite-math-only). */
static struct {
  mt_bf16 value[1 << 16];
  float slope[1 << 16];
} g_gelu_bf16;
static pthread_once_t g_gelu_bf16_once = PTHREAD_ONCE_INIT;

static void gelu_entry(uint32_t i, float x) {
  g_gelu_bf16.value[i] = mt_bf16_from_f32(gelu_value(x));
  g_gelu_bf16.slope[i] = gelu_slope(x);
}
static void gelu_entry_nan(uint32_t i) {
  g_gelu_bf16.value[i] = (mt_bf16)(i | 0x0040u);
  g_gelu_bf16.slope[i] = nan_of_bits(i);
}
static void gelu_bf16_fill(void) { fill_every_bf16(gelu_entry, gelu_entry_nan); }

/* the tables, filled at the first call of any thread */
static void gelu_bf16_ready(void) { pthread_once(&g_gelu_bf16_once, gelu_bf16_fill); }

/* SwiGLU's gate on bf16 storage, likewise: per bf16 gate g, with e =
 * exp(-g), silu = g / (1 + e) (the forward's), s = 1 / (1 + e) and 1 + g
 * (1 - s) (the backward's factors), each the fp32 arithmetic's value; the
 * ops multiply them in the fp32 ops' order, so the bits are those ops'.
 * 768 KiB; NaN gates give NaNs. */
static struct {
  float silu[1 << 16], sig[1 << 16], fac[1 << 16];
} g_swiglu_bf16;
static pthread_once_t g_swiglu_bf16_once = PTHREAD_ONCE_INIT;

static void swiglu_entry(uint32_t i, float g) {
  float e = mt_exp_poly(-g), s = 1.0f / (1.0f + e);
  g_swiglu_bf16.silu[i] = g / (1.0f + e);
  g_swiglu_bf16.sig[i] = s;
  g_swiglu_bf16.fac[i] = 1.0f + g * (1.0f - s);
}
static void swiglu_entry_nan(uint32_t i) {
  g_swiglu_bf16.silu[i] = g_swiglu_bf16.sig[i] = g_swiglu_bf16.fac[i] = nan_of_bits(i);
}
static void swiglu_bf16_fill(void) { fill_every_bf16(swiglu_entry, swiglu_entry_nan); }

static void swiglu_bf16_ready(void) { pthread_once(&g_swiglu_bf16_once, swiglu_bf16_fill); }

#define MT_TYPED_BODY "kernels/cpu/gelu_t.h"
#include "kernels/cpu/typed.h"
