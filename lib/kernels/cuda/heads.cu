/* The CUDA backend's ops on attention heads before attention: rotary
 * position embedding in place, and grouped-query attention's key/value
 * spread, which can turn q and k by their positions on the way (kernels.h).
 * One thread per element written (or per pair turned), templated on the
 * storage type S (cuda_common.cuh's mt_ld / mt_st): fp32 math, one
 * rounding per stored bf16 value; the CPU's twins are in cpu/rope_t.h and
 * cpu/elementwise_t.h. */
#include "kernels/cuda/cuda_common.cuh"

/* rotary embedding's turn of one channel d of a head (kernels.h): the pair
 * (x1, x2) = channels (d mod half, that + half), cosine co, sine sn (times
 * the direction); channel d < half gets x1', the other x2'. One expression
 * for rope_kernel and the fused spread, so both give the same bits. */
__device__ static inline float rope_turn(bool second, float x1, float x2, float co, float sn) {
  return second ? x2 * co + x1 * sn : x1 * co - x2 * sn;
}

/* grouped-query attention's key/value spread (kernels.h), one thread per
 * element written. Forward: element (r, col) of qkv (rows, 3 Cl) from the
 * element of c (rows, Cl + 2 Ckv) it copies; with cs, a q or key channel
 * from the pair it turns (rope on c, then the copy). */
template <typename S>
__global__ void kv_spread_kernel(S *qkv, const S *c, size_t rows, int nh, int nkv, int hs,
                                 int h0, int group, size_t Cq, const float *cs, const int *pos,
                                 int T) {
  const size_t Cl = (size_t)nh * hs, Ckv = (size_t)nkv * hs, w = Cq + 2 * Cl, n = rows * w;
  const int half = hs / 2;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / w, col = i % w, from = col, d = col % hs;
    if (col >= Cq) { /* a key (kv 0) or value (1) channel of query head h */
      size_t kv = (col - Cq) / Cl, h = (col - Cq) % Cl / hs;
      from = Cq + kv * Ckv + (size_t)((h0 + (int)h) / group) * hs + d;
    }
    const S *row = c + r * (Cq + 2 * Ckv);
    if (!cs || col >= Cq + Cl) { /* no turn; a value channel */
      qkv[i] = row[from];
      continue;
    }
    const float *co = cs + (pos ? (size_t)pos[r] : r % (size_t)T) * hs;
    size_t pair = d % half, head = from - d;
    float sn = 1.0f * co[half + pair];
    qkv[i] = mt_st<S>(rope_turn(d >= (size_t)half, mt_ld(row[head + pair]),
                                mt_ld(row[head + pair + half]), co[pair], sn));
  }
}

/* element col of a dc row: 0 + the dqkv elements it gathers (its q element,
 * or one channel of the query heads of a key/value head, in head order) in
 * fp32, rounded once */
template <typename S>
__device__ static S kv_gathered(const S *x, size_t col, int nh, int hs, int h0, int group,
                                size_t Cq, size_t Cl, size_t Ckv) {
  float acc = 0.0f;
  if (col < Cq) {
    acc += mt_ld(x[col]);
  } else {
    size_t kv = (col - Cq) / Ckv, d = col % hs;
    int j = (int)((col - Cq) % Ckv / hs);
    int h_lo = max(0, j * group - h0), h_hi = min(nh, (j + 1) * group - h0);
    for (int h = h_lo; h < h_hi; h++) acc += mt_ld(x[Cq + kv * Cl + (size_t)h * hs + d]);
  }
  return mt_st<S>(acc);
}

/* backward: element (r, col) of dc, kv_gathered; with cs, a q or key
 * channel turned back from the rounded pair (kv_spread_backward, then rope
 * inverse on dc) */
template <typename S>
__global__ void kv_spread_backward_kernel(S *dc, const S *dqkv, size_t rows, int nh, int nkv,
                                          int hs, int h0, int group, size_t Cq, const float *cs,
                                          const int *pos, int T) {
  const size_t Cl = (size_t)nh * hs, Ckv = (size_t)nkv * hs, W = Cq + 2 * Ckv, n = rows * W;
  const int half = hs / 2;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / W, col = i % W;
    const S *x = dqkv + r * (Cq + 2 * Cl);
    if (!cs || col >= Cq + Ckv) { /* no turn; a value channel */
      dc[i] = kv_gathered(x, col, nh, hs, h0, group, Cq, Cl, Ckv);
      continue;
    }
    const float *co = cs + (pos ? (size_t)pos[r] : r % (size_t)T) * hs;
    size_t d = col % hs, pair = d % half, head = col - d;
    float x1 = mt_ld(kv_gathered(x, head + pair, nh, hs, h0, group, Cq, Cl, Ckv));
    float x2 = mt_ld(kv_gathered(x, head + pair + half, nh, hs, h0, group, Cq, Cl, Ckv));
    float sn = -1.0f * co[half + pair];
    dc[i] = mt_st<S>(rope_turn(d >= (size_t)half, x1, x2, co[pair], sn));
  }
}

template <typename S>
void mt_cuda_kv_spread(void *qkv, const void *c, size_t rows, int nh, int nkv, int hs, int h0,
                       int group, int with_q, const float *cs, const int *pos, int T) {
  size_t n = rows * (with_q ? 3 : 2) * (size_t)nh * hs;
  if (!n) return;
  kv_spread_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      (S *)qkv, (const S *)c, rows, nh, nkv, hs, h0, group,
      with_q ? (size_t)nh * hs : 0, cs, pos, T);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(kv_spread)

template <typename S>
void mt_cuda_kv_spread_backward(void *dc, const void *dqkv, size_t rows, int nh, int nkv,
                                int hs, int h0, int group, int with_q, const float *cs,
                                const int *pos, int T) {
  size_t n = rows * ((with_q ? (size_t)nh : 0) + 2 * (size_t)nkv) * hs;
  if (!n) return;
  kv_spread_backward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      (S *)dc, (const S *)dqkv, rows, nh, nkv, hs, h0, group,
      with_q ? (size_t)nh * hs : 0, cs, pos, T);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(kv_spread_backward)

/* ------------------------------------------------------------------ */
/* rotary embedding: one thread per (row, head, pair), in place         */

template <typename S>
__global__ void rope_kernel(S *x, size_t ld, int B, int T, int nh, int hs, const float *cs,
                            const int *pos, float sign) {
  const int half = hs / 2;
  size_t n = (size_t)B * T * nh * half;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int d = (int)(i % half);
    size_t rh = i / half;
    int h = (int)(rh % nh);
    size_t r = rh / nh;
    const float *c = cs + (pos ? (size_t)pos[r] : r % T) * hs;
    S *a = x + r * ld + (size_t)h * hs + d, *b = a + half;
    float x1 = mt_ld(*a), x2 = mt_ld(*b), sn = sign * c[half + d];
    *a = mt_st<S>(rope_turn(false, x1, x2, c[d], sn));
    *b = mt_st<S>(rope_turn(true, x1, x2, c[d], sn));
  }
}

template <typename S>
void mt_cuda_rope(void *x, size_t ld, int B, int T, int nh, int hs, const float *cs,
                  const int *pos, int inverse) {
  size_t n = (size_t)B * T * nh * (hs / 2);
  if (!n) return;
  rope_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)x, ld, B, T, nh, hs, cs, pos,
                                                              inverse ? -1.0f : 1.0f);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(rope)
