/* One head's rotary turn, for the bodies of rope.c and of the key/value
 * spread (elementwise.c): included inside a body file (typed.h), so once
 * per storage type T, and without an include guard.
 *
 * dst (2 half) = src turned by the angles of pairs (d, d + half), cosine
 * c[d] and sine s[d]: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (sign
 * -1: turned back). dst may be src (each pair is read before it is
 * written): one expression for every caller, so the fused ops give rope's
 * bits. */
static inline void FN(rope_head)(T *dst, const T *src, const float *c, const float *s, int half,
                                 float sign) {
#pragma omp simd
  for (int d = 0; d < half; d++) {
    float x1 = LD(src[d]), x2 = LD(src[d + half]), sn = sign * s[d];
    dst[d] = ST(x1 * c[d] - x2 * sn);
    dst[d + half] = ST(x2 * c[d] + x1 * sn);
  }
}
