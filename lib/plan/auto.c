/* parallel.layout = auto: the run asks the planner, at every start, for the
 * fastest layout of its model and batch on the ranks it was launched with
 * (a requeued job that comes back on another number of nodes gets a new
 * layout, and resumes its universal checkpoint under it). Pure and without
 * MPI: every rank computes the same answer from the same inputs. */
#include "plan/plan.h"

#include <string.h>

/* plan.hw, else on the virtual device the profile it emulates
 * (train.virtual_hw: the run's own prices and memory), else metrics.hw */
const char *mt_plan_auto_hw(const mt_config *cfg) {
  if (cfg->plan_hw[0]) return cfg->plan_hw;
  if (cfg->device == MT_DEVICE_VIRTUAL && cfg->virtual_hw[0]) return cfg->virtual_hw;
  return cfg->hw_profile;
}

int mt_plan_auto(mt_config *cfg, int world, mt_search_row *best, mt_search_row *second,
                 int *n_ranked, mt_err *e) {
  const char *hw = mt_plan_auto_hw(cfg);
  mt_cost_profile p;
  mt_err le = {0};
  if (mt_cost_profile_load(&p, hw, &le) != 0) {
    mt_err_set(e, "parallel.layout = auto needs a cost profile (a [cost] section): %s (set "
                  "plan.hw to one, e.g. one made by meshplan calibrate)", le.msg);
    return -1;
  }
  mt_search_opts o = {.world = world, .keep = 2, .dt = NULL};
  mt_search s;
  if (mt_search_run(cfg, &p, &o, &s, &le) != 0) {
    mt_search_free(&s);
    mt_err_set(e, "parallel.layout = auto on %d ranks: %s (launch more ranks, shrink the model "
                  "or train.global_batch, or lower plan.headroom)", world, le.msg);
    return -1;
  }
  *best = s.r[0];
  if (second) {
    if (s.n > 1) *second = s.r[1];
    else memset(second, 0, sizeof *second);
  }
  if (n_ranked) *n_ranked = s.fitting;
  mt_search_row_apply(&s.r[0], cfg);
  mt_search_free(&s);
  return 0;
}
