/* The bytes per element of each state category the cost model prices
 * (plan.h's mt_cost_dtypes): the defaults of a profile, a --dtype
 * override, and the one-line text meshplan prints. */
#include "plan/cost_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_cost_dtypes_default(const mt_config *cfg, const mt_cost_profile *p, mt_cost_dtypes *d) {
  /* the configuration's own precision first: train.precision = bf16 is
   * what meshtrain's layout resolves (mt_dtypes_resolve): a bf16 weights'
   * copy, activations and messages over fp32 master weights and moments,
   * the gradients and their reduction as train.grad_dtype and
   * parallel.grad_reduce_dtype say */
  if (cfg && cfg->precision == MT_PRECISION_BF16) {
    mt_dtypes run;
    mt_dtypes_resolve(cfg->precision, cfg->grad_dtype, cfg->grad_reduce_dtype, &run);
    mt_cost_dtypes_counted(&run, d);
    return;
  }
  /* an fp32 configuration on a bf16 profile (act_bytes = 2, "the runs
   * priced on it train in bf16"): Megatron-LM's mixed precision (bf16
   * weights copy, activations and messages; fp32 master, gradients,
   * moments and gradient reduction); else fp32 throughout, the weights
   * being the master */
  if (p->act_bytes == 2)
    *d = (mt_cost_dtypes){.weights = 2, .master = 4, .grads = 4, .moments = 4, .acts = 2,
                          .grad_reduce = 4, .msg = 2};
  else
    *d = (mt_cost_dtypes){.weights = 4, .master = 0, .grads = 4, .moments = 4, .acts = 4,
                          .grad_reduce = 4, .msg = 4};
}

void mt_cost_dtypes_counted(const mt_dtypes *run, mt_cost_dtypes *d) {
  /* an fp32 run's weights are its master (no separate copy); a bf16 run
   * holds an fp32 master beside the bf16 copy */
  *d = (mt_cost_dtypes){.weights = (double)mt_dtype_bytes(run->weights),
                        .master = run->weights == MT_DT_F32 ? 0.0 : 4.0,
                        .grads = (double)mt_dtype_bytes(run->grads), .moments = 4,
                        .acts = (double)mt_dtype_bytes(run->acts),
                        .grad_reduce = (double)mt_dtype_bytes(run->grad_reduce),
                        .msg = (double)mt_dtype_bytes(run->msgs)};
}

static const char *g_dtype_names[] = {"weights", "master", "grads", "moments", "acts",
                                      "grad_reduce", "msg"};

static double *dtype_field(mt_cost_dtypes *d, int i) {
  double *f[] = {&d->weights, &d->master, &d->grads, &d->moments, &d->acts, &d->grad_reduce,
                 &d->msg};
  return f[i];
}

int mt_cost_dtypes_set(mt_cost_dtypes *d, const char *assignment, mt_err *e) {
  const char *eq = strchr(assignment, '=');
  for (int i = 0; eq && i < 7; i++) {
    size_t n = strlen(g_dtype_names[i]);
    if ((size_t)(eq - assignment) != n || strncmp(assignment, g_dtype_names[i], n) != 0) continue;
    char *end = NULL;
    double x = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !(x == 1 || x == 2 || x == 4 || (x == 0 && i == 1))) break;
    *dtype_field(d, i) = x;
    return 0;
  }
  mt_err_set(e, "--dtype '%s': expected CATEGORY=BYTES with a category of weights, master, "
                "grads, moments, acts, grad_reduce, msg and bytes 1, 2 or 4 (master also 0)",
             assignment);
  return -1;
}

void mt_cost_dtypes_text(const mt_cost_dtypes *d, char *buf, size_t len) {
  size_t at = 0;
  for (int i = 0; i < 7 && at < len; i++) {
    int n = snprintf(buf + at, len - at, "%s%s %g", i ? ", " : "", g_dtype_names[i],
                     *dtype_field((mt_cost_dtypes *)d, i));
    if (n < 0) break;
    at += (size_t)n;
  }
}
