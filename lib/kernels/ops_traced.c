/* The CPU table with every compute op on the timeline (metrics.trace =
 * true on the CPU device): each op runs the CPU's own and records its wall
 * span on the compute track under the op's member name, the name the
 * virtual device gives the same op (null/ops_virtual.c), so a real and an
 * emulated trace of one layout compare op by op (meshreport timeline's
 * per-op table), whatever the storage type. Memory, transfers and sync pass
 * straight through. The CPU
 * runs ops synchronously, so a span is the op's time; a CUDA op would need
 * a sync per op, which is why only the CPU has this table. */
#include "kernels/kernels.h"

static const mt_ops *g_base;
static mt_ops g_traced;

/* time the call in the enclosing wrapper under its member name */
#define SPAN(call)                                                                         \
  do {                                                                                     \
    double t0_ = mt_now();                                                                 \
    call;                                                                                  \
    mt_trace_span(__func__ + 2, "op", MT_TRACK_COMPUTE, t0_, mt_now(), -1, -1);            \
  } while (0)

/* every op of the lists, timed under its member name (t_<name>) */
#define TRACED_TYPED_(name, params, args)                   \
  static void t_##name(mt_dtype t, MT_OPS_UNPAREN params) { \
    SPAN(g_base->name(t, MT_OPS_UNPAREN args));             \
  }
#define TRACED_SUMS_(name, params, args)                                                    \
  static double t_##name(mt_dtype t, MT_OPS_UNPAREN params) {                               \
    double r;                                                                               \
    SPAN(r = g_base->name(t, MT_OPS_UNPAREN args));                                              \
    return r;                                                                               \
  }
#define TRACED_FIXED_(name, optional, params, args)                                         \
  static void t_##name params { SPAN(g_base->name args); }
MT_OPS_TYPED(TRACED_TYPED_)
MT_OPS_TYPED_SUMS(TRACED_SUMS_)
MT_OPS_FIXED(TRACED_FIXED_)

const mt_ops *mt_ops_cpu_traced(void) {
  if (!g_base) {
    g_base = mt_ops_cpu();
    g_traced = *g_base; /* memory, transfers, sync */
#define TRACED_SET_(name, params, args) g_traced.name = t_##name;
#define TRACED_SET_FIXED_(name, optional, params, args) g_traced.name = t_##name;
    MT_OPS_TYPED(TRACED_SET_)
    MT_OPS_TYPED_SUMS(TRACED_SET_)
    MT_OPS_FIXED(TRACED_SET_FIXED_)
#undef TRACED_SET_
#undef TRACED_SET_FIXED_
  }
  return &g_traced;
}
