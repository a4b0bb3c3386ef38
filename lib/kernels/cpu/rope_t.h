/* Bodies of rope.c, over the storage type T (typed.h). */

#include "kernels/cpu/rope_head_t.h"

/* x (B rows of T, nh heads of hs at row stride ld) turned in place by cs
 * (a row per position: cos | sin of its hs/2 angles) at each row's
 * position (pos, or the row's index); inverse: the other way */
void FN(rope)(void *x_, size_t ld, int B, int T_, int nh, int hs, const float *cs,
              const int *pos, int inverse) {
  T *x = x_;
  const int half = hs / 2;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < (long)B * T_; r++) {
    const float *c = cs + (size_t)(pos ? pos[r] : (int)(r % T_)) * hs;
    T *row = x + (size_t)r * ld;
    for (int h = 0; h < nh; h++) FN(rope_head)(row + (size_t)h * hs, row + (size_t)h * hs, c,
                                               c + half, half, sign);
  }
}
