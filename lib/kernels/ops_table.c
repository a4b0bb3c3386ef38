/* kernels: the op table's completeness check. A backend that leaves a
 * member NULL would crash the first time the model calls it, far from the
 * cause; mt_ops_missing names every such member instead (the CUDA backend
 * checks its table when it builds it; tests check both tables). */
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

int mt_ops_unpriced(const mt_ops *ops, const mt_ops *base, char *names, size_t len) {
  int n = 0;
  if (names && len) names[0] = '\0';
  /* memory and its moves take no time on a priced table: the base's */
  static const char *const free_ops[] = {"alloc", "free", "upload", "download", "sync"};
#define MT_OPS_PRICED_ONE(member, optional)                                                \
  {                                                                                        \
    int exempt = 0;                                                                        \
    for (size_t i = 0; i < sizeof free_ops / sizeof free_ops[0]; i++)                      \
      exempt |= strcmp(free_ops[i], #member) == 0;                                         \
    if (!exempt && (void (*)(void))ops->member == (void (*)(void))base->member)            \
      append_name(names, len, n++, #member);                                               \
  }
  MT_OPS_MEMBERS(MT_OPS_PRICED_ONE)
#undef MT_OPS_PRICED_ONE
  return n;
}

#define MT_OPS_BF16_COUNT_ONE(member) +1
_Static_assert(sizeof(mt_ops_bf16) ==
                   offsetof(mt_ops_bf16, matmul_forward) +
                       (0 MT_OPS_BF16_MEMBERS(MT_OPS_BF16_COUNT_ONE)) * sizeof(void (*)(void)),
               "mt_ops_bf16 has a member that MT_OPS_BF16_MEMBERS in kernels.h does not list");

int mt_ops_bf16_missing(const mt_ops_bf16 *ops, char *names, size_t len) {
  int n = 0;
  if (names && len) names[0] = '\0';
#define MT_OPS_BF16_CHECK_ONE(member)                                                      \
  if (!ops->member) append_name(names, len, n++, #member);
  MT_OPS_BF16_MEMBERS(MT_OPS_BF16_CHECK_ONE)
#undef MT_OPS_BF16_CHECK_ONE
  return n;
}

const mt_ops_bf16 *mt_ops_bf16_of(const mt_ops *ops) {
  if (ops == mt_ops_cpu() || ops == mt_ops_cpu_traced()) return mt_ops_bf16_cpu();
  if (ops == mt_ops_null()) return mt_ops_bf16_null();
  if (ops == mt_ops_virtual()) return mt_ops_bf16_virtual();
  if (ops && ops == mt_ops_cuda()) return mt_ops_bf16_cuda();
  return NULL;
}
