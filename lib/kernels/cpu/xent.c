/* Softmax + cross-entropy on the CPU, whole and vocabulary-parallel, over
 * the storage type of the logits (bodies in xent_t.h, instantiated for
 * float and bf16 by typed.h); fp32 math, losses and row statistics fp32 or
 * fp64. Row n of logits (N,Vp): p = softmax(logits[n, 0:V]), 0 on padding
 * columns V..Vp-1; losses[n] = -log p[target] computed as log(sum_j exp(l_j
 * - max)) + max - l_target, which stays finite when p[target] underflows.
 * The maximum and the exps are rows_cpu.c's vectorised loops (a polynomial
 * exp, relative error below 2e-7); a sum over a row (up to ~50k terms) is
 * in double. A bf16 row is widened into a row of the thread's own first
 * (an fp32 row is read where it is); each probability is rounded once.
 * Split by rows, schedule(static): the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"

#include <math.h>

/* the scratch slot of a widened row (mt_cpu_scratch) */
#define MT_XENT_ROW_SLOT 14

#define MT_TYPED_BODY "kernels/cpu/xent_t.h"
#include "kernels/cpu/typed.h"
