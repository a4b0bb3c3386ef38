/* Causal self-attention, the op table's T x T reference (attention_forward
 * and attention_backward; tests and benchmarks): the softmax probabilities
 * P (B,NH,T,T) are kept in att for the backward. Per sequence b, the NH
 * heads are one strided batch of cuBLASLt products that read q, k, v in
 * place in qkv (B,T,3C) and write out (B,T,C) in place (no permutes), with
 * a fused causal softmax between them. The model's attention is the block
 * one (online softmax, a saved log-sum-exp, no T x T matrix) in
 * attention_flash.cu.
 *
 * Column-major views (head h, stored (rows x cols) with leading dimension):
 *   Q^T, K^T, V^T  (hs x T, ld 3C)    dO^T, O^T  (hs x T, ld C)
 *   att as stored  (T_j x T_i, ld T)  = P^T (entry (j,i) is P[i][j])
 *   forward   P^T  = scale op_T(K^T) op_N(Q^T)        then softmax over j <= i
 *             O^T  = op_N(V^T) op_N(P^T)
 *   backward  dV^T += op_N(dO^T) op_T(P^T)
 *             dP^T  = op_T(V^T) op_N(dO^T)           dS = P (dP - rowsum(P dP))
 *             dQ^T += scale op_N(K^T) op_N(dS^T)
 *             dK^T += scale op_N(Q^T) op_T(dS^T)
 * Under bf16 the operands of each sequence (its q, k, v, dout and P or dS)
 * are rounded to bf16 into the backend's scratch, heads in groups that fit. */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

/* row r of att (r = (b*NH + h)*T + i): P = softmax over j <= i, 0 after */
__global__ void causal_softmax_kernel(float *att, size_t rows, int T) {
  int lane = threadIdx.x % 32;
  size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  int i = (int)(r % (size_t)T);
  float *row = att + r * T;
  float m = -INFINITY;
  for (int j = lane; j <= i; j += 32) m = fmaxf(m, row[j]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.0f;
  for (int j = lane; j <= i; j += 32) {
    float e = expf(row[j] - m);
    row[j] = e;
    s += e;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  float inv = 1.0f / s;
  for (int j = lane; j < T; j += 32) row[j] = j <= i ? row[j] * inv : 0.0f;
}

/* dS = P (dP - sum_j P dP) for j <= i, 0 after; in place over dP */
__global__ void causal_softmax_backward_kernel(float *dp, const float *att, size_t rows, int T) {
  int lane = threadIdx.x % 32;
  size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  int i = (int)(r % (size_t)T);
  const float *p = att + r * T;
  float *d = dp + r * T;
  float dot = 0.0f;
  for (int j = lane; j <= i; j += 32) dot += p[j] * d[j];
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  for (int j = lane; j < T; j += 32) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
}

/* heads per group under bf16: the sequence's operands (fixed elements) plus
 * per_head elements for each head of the group must fit the scratch */
static int head_group(int NH, size_t fixed, size_t per_head) {
  size_t cap = g_cu.scratch_bytes / sizeof(__nv_bfloat16);
  if (fixed + per_head > cap)
    mt_die("CUDA backend: attention under bf16 needs %zu bytes of scratch for one head, %zu "
           "reserved (raise MT_CUDA_SCRATCH_MB)", (fixed + per_head) * sizeof(__nv_bfloat16),
           g_cu.scratch_bytes);
  size_t g = (cap - fixed) / per_head;
  return g >= (size_t)NH ? NH : (int)g;
}

void mt_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t TT = (size_t)T * T;
  const int bf16 = g_cu.gemm == MT_GEMM_BF16;
  const cudaDataType_t ty = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const size_t es = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  int hg = bf16 ? head_group(NH, (size_t)T * C3, TT) : NH;
  __nv_bfloat16 *sq = bf16 ? (__nv_bfloat16 *)mt_cuda_scratch(g_cu.scratch_bytes, "attention")
                           : NULL;
  __nv_bfloat16 *sp = sq ? sq + (size_t)T * C3 : NULL;
  for (int b = 0; b < B; b++) {
    const float *qkv_b = qkv + (size_t)b * T * C3;
    float *att_b = att + (size_t)b * NH * TT, *out_b = out + (size_t)b * T * C;
    const char *q = (const char *)qkv_b;
    if (bf16) {
      mt_cuda_to_bf16(sq, qkv_b, (size_t)T * C3);
      q = (const char *)sq;
    }
    /* P^T = scale K Q^T for every head, then the causal softmax */
    mt_cuda_gemm(1, 0, T, T, hs, scale, q + (size_t)C * es, C3, hs, q, C3, hs, 0.0f, att_b, T,
                 (long long)TT, NH, ty, NULL);
    size_t rows = (size_t)NH * T;
    causal_softmax_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, g_cu.stream>>>(att_b, rows, T);
    CUDA_LAUNCH_CHECK();
    /* O^T = V^T P^T, heads in groups (all at once under fp32) */
    for (int h0 = 0; h0 < NH; h0 += hg) {
      int nh = NH - h0 < hg ? NH - h0 : hg;
      const void *P = att_b + (size_t)h0 * TT;
      if (bf16) {
        mt_cuda_to_bf16(sp, att_b + (size_t)h0 * TT, (size_t)nh * TT);
        P = sp;
      }
      mt_cuda_gemm(0, 0, hs, T, T, 1.0f, q + ((size_t)2 * C + (size_t)h0 * hs) * es, C3, hs, P, T,
                   (long long)TT, 0.0f, out_b + (size_t)h0 * hs, C, hs, nh, ty, NULL);
    }
  }
}

void mt_cuda_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t TT = (size_t)T * T;
  const int bf16 = g_cu.gemm == MT_GEMM_BF16;
  const cudaDataType_t ty = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const size_t es = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  int hg = bf16 ? head_group(NH, (size_t)T * C3 + (size_t)T * C, TT) : NH;
  __nv_bfloat16 *sq = bf16 ? (__nv_bfloat16 *)mt_cuda_scratch(g_cu.scratch_bytes, "attention")
                           : NULL;
  __nv_bfloat16 *sdo = sq ? sq + (size_t)T * C3 : NULL;
  __nv_bfloat16 *sp = sdo ? sdo + (size_t)T * C : NULL;
  for (int b = 0; b < B; b++) {
    const float *qkv_b = qkv + (size_t)b * T * C3, *dout_b = dout + (size_t)b * T * C;
    const float *att_b = att + (size_t)b * NH * TT;
    float *datt_b = datt + (size_t)b * NH * TT, *dqkv_b = dqkv + (size_t)b * T * C3;
    const char *q = (const char *)qkv_b, *dO = (const char *)dout_b;
    if (bf16) {
      mt_cuda_to_bf16(sq, qkv_b, (size_t)T * C3);
      mt_cuda_to_bf16(sdo, dout_b, (size_t)T * C);
      q = (const char *)sq;
      dO = (const char *)sdo;
    }
    for (int h0 = 0; h0 < NH; h0 += hg) {
      int nh = NH - h0 < hg ? NH - h0 : hg;
      size_t ho = (size_t)h0 * hs; /* this group's first column in q, k, v, out */
      const float *P32 = att_b + (size_t)h0 * TT;
      float *dP = datt_b + (size_t)h0 * TT;
      const void *P = P32;
      if (bf16) {
        mt_cuda_to_bf16(sp, P32, (size_t)nh * TT);
        P = sp;
      }
      /* dV^T += dO^T P */
      mt_cuda_gemm(0, 1, hs, T, T, 1.0f, dO + ho * es, C, hs, P, T, (long long)TT, 1.0f,
                   dqkv_b + 2 * (size_t)C + ho, C3, hs, nh, ty, NULL);
      /* dP^T = V dO^T, then dS in place */
      mt_cuda_gemm(1, 0, T, T, hs, 1.0f, q + (2 * (size_t)C + ho) * es, C3, hs, dO + ho * es, C,
                   hs, 0.0f, dP, T, (long long)TT, nh, ty, NULL);
      size_t rows = (size_t)nh * T;
      causal_softmax_backward_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, g_cu.stream>>>(
          dP, P32, rows, T);
      CUDA_LAUNCH_CHECK();
      const void *dS = dP;
      if (bf16) {
        mt_cuda_to_bf16(sp, dP, (size_t)nh * TT); /* after dV read P there (stream order) */
        dS = sp;
      }
      /* dQ^T += scale K^T dS^T;  dK^T += scale Q^T dS */
      mt_cuda_gemm(0, 0, hs, T, T, scale, q + ((size_t)C + ho) * es, C3, hs, dS, T, (long long)TT,
                   1.0f, dqkv_b + ho, C3, hs, nh, ty, NULL);
      mt_cuda_gemm(0, 1, hs, T, T, scale, q + ho * es, C3, hs, dS, T, (long long)TT, 1.0f,
                   dqkv_b + (size_t)C + ho, C3, hs, nh, ty, NULL);
    }
  }
}
