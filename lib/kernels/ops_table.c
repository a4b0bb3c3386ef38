/* kernels: the op table's completeness checks. A backend that leaves a
 * member NULL would crash the first time the model calls it, far from the
 * cause; mt_ops_missing names every such member instead (the CUDA backend
 * checks its table when it builds it; tests check every table). */
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* every member after loc is one function pointer, without padding: the
 * five memory members, moe_routing_id and one per list entry */
#define MT_OPS_COUNT_(name, params, args) +1
#define MT_OPS_COUNT_FIXED_(name, optional, params, args) +1
_Static_assert(sizeof(mt_ops) == offsetof(mt_ops, alloc) +
                                     (6 MT_OPS_TYPED(MT_OPS_COUNT_) MT_OPS_TYPED_SUMS(MT_OPS_COUNT_)
                                          MT_OPS_FIXED(MT_OPS_COUNT_FIXED_)) *
                                         sizeof(void (*)(void)),
               "mt_ops has a member outside its lists");

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
#define MT_OPS_CHECK_(member)                                                              \
  if (!ops->member) append_name(names, len, n++, #member);
  MT_OPS_CHECK_(alloc) MT_OPS_CHECK_(free) MT_OPS_CHECK_(upload) MT_OPS_CHECK_(download)
  MT_OPS_CHECK_(sync)
#define MT_OPS_CHECK_LIST_(name, params, args) MT_OPS_CHECK_(name)
#define MT_OPS_CHECK_FIXED_(name, optional, params, args)                                  \
  if (!(optional)) MT_OPS_CHECK_(name)
  MT_OPS_TYPED(MT_OPS_CHECK_LIST_)
  MT_OPS_TYPED_SUMS(MT_OPS_CHECK_LIST_)
  MT_OPS_FIXED(MT_OPS_CHECK_FIXED_)
#undef MT_OPS_CHECK_
#undef MT_OPS_CHECK_LIST_
#undef MT_OPS_CHECK_FIXED_
  return n;
}

int mt_ops_unpriced(const mt_ops *ops, const mt_ops *base, char *names, size_t len) {
  int n = 0;
  if (names && len) names[0] = '\0';
  /* memory and its moves take no time on a priced table: the base's */
#define MT_OPS_PRICED_(name, params, args)                                                 \
  if ((void (*)(void))ops->name == (void (*)(void))base->name)                             \
    append_name(names, len, n++, #name);
#define MT_OPS_PRICED_FIXED_(name, optional, params, args) MT_OPS_PRICED_(name, params, args)
  MT_OPS_TYPED(MT_OPS_PRICED_)
  MT_OPS_TYPED_SUMS(MT_OPS_PRICED_)
  MT_OPS_FIXED(MT_OPS_PRICED_FIXED_)
#undef MT_OPS_PRICED_
#undef MT_OPS_PRICED_FIXED_
  return n;
}
