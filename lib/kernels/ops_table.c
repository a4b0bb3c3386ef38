/* kernels: the op table's completeness check. A backend that leaves a
 * member NULL would crash the first time the model calls it, far from the
 * cause; mt_ops_missing names every such member instead (the CUDA backend
 * checks its table when it builds it; tests check both tables). */
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Every member after `loc`, in the order of mt_ops. `optional` marks those
 * a backend may leave NULL (the T x T reference attention). */
#define MT_OPS_MEMBERS(X)                                                                  \
  X(alloc, 0) X(free, 0) X(upload, 0) X(download, 0) X(zero, 0) X(copy, 0) X(axpy, 0)      \
  X(sum, 0) X(sync, 0) X(encoder_forward, 0) X(encoder_backward, 0)                      \
  X(layernorm_forward, 0) X(layernorm_backward, 0) X(matmul_forward, 0)                  \
  X(matmul_backward, 0) X(encoder_vp_forward, 0) X(encoder_vp_backward, 0)               \
  X(attention_forward, 1) X(attention_backward, 1) X(attn_forward, 0) X(attn_merge, 0)   \
  X(attn_backward, 0) X(copy_2d, 0) X(add_2d, 0) X(gelu_forward, 0) X(gelu_backward, 0)  \
  X(residual_forward, 0) X(softmax_xent_forward, 0) X(softmax_xent_backward, 0)          \
  X(xent_vp_max, 0) X(xent_vp_exp, 0) X(xent_vp_finish, 0) X(xent_vp_backward, 0)        \
  X(adamw_update, 0) X(moe_router_forward, 0) X(moe_router_backward, 0)                 \
  X(moe_prob_sums, 0) X(gather_rows, 0) X(moe_combine, 0) X(moe_combine_backward, 0)     \
  X(moe_gather_sum, 0) X(grouped_matmul_forward, 0) X(grouped_matmul_backward, 0)        \
  X(sumsq, 0) X(scale, 0)

#define MT_OPS_COUNT_ONE(member, optional) +1
/* A member added to mt_ops but not to the list above fails the build here
 * (every member after loc is one function pointer, without padding). */
_Static_assert(sizeof(mt_ops) ==
                   offsetof(mt_ops, alloc) + (0 MT_OPS_MEMBERS(MT_OPS_COUNT_ONE)) *
                                                 sizeof(void (*)(void)),
               "mt_ops has a member that MT_OPS_MEMBERS in ops_table.c does not list");

/* appends ", name" (or "name") to names, truncating at len */
static void append_name(char *names, size_t len, int count, const char *name) {
  if (!names || !len) return;
  size_t used = strlen(names);
  if (used + 1 >= len) return;
  snprintf(names + used, len - used, "%s%s", count ? ", " : "", name);
}

int mt_ops_missing(const mt_ops *ops, char *names, size_t len) {
  int n = 0;
  if (names && len) names[0] = '\0';
#define MT_OPS_CHECK_ONE(member, optional)                                                 \
  if (!(optional) && !ops->member) append_name(names, len, n++, #member);
  MT_OPS_MEMBERS(MT_OPS_CHECK_ONE)
#undef MT_OPS_CHECK_ONE
  return n;
}
