/* What meshtrain prints without training: the check of a configuration for
 * a world size, the plan, and the pipeline schedule. No MPI. */
#include "plan/plan.h"

#include <cjson/cJSON.h>

int mt_plan_check_report(const mt_config *cfg, int ranks, FILE *out, mt_err *e) {
  mt_layout lay;
  int rc = mt_layout_validate(cfg, ranks, &lay, e) == 0 ? 0 : mt_err_pass(e);
  const size_t n_params = rc == 0 ? mt_model_num_params(&lay.shape) : 0;
  mt_layout_free(&lay);
  if (rc != 0) return rc;
  /* the virtual device starts every rank on this machine: whether it can,
   * before the verdict (a configuration this machine cannot start is not OK) */
  mt_host_rank_cost c;
  mt_host_limits l;
  if (cfg->device == MT_DEVICE_VIRTUAL) {
    char why[512];
    mt_host_rank_cost_default(&c);
    mt_host_limits_read("", &l);
    if (mt_host_fit(ranks, &c, &l, why, sizeof why) != 0) {
      mt_err_set(e, "train.device = virtual: %s", why);
      return -1;
    }
  }
  fprintf(out, "meshtrain: check: OK for %d ranks: model %s (%zu parameters), mesh pp=%d dp=%d "
               "cp=%d tp=%d, zero %d, global batch %d, %d steps\n",
          ranks, mt_preset_name(cfg->model_preset), n_params, cfg->pp, cfg->dp, cfg->cp, cfg->tp,
          cfg->zero, cfg->global_batch, cfg->steps);
  if (cfg->device == MT_DEVICE_VIRTUAL)
    fprintf(out, "meshtrain: check: this machine can start %d virtual ranks: about %.2f GiB of "
                 "host memory of %.2f GiB usable (%s), %d threads, ulimit -n and /dev/shm "
                 "suffice\n", ranks, mt_host_ranks_bytes(ranks, &c) / 1073741824.0,
            l.mem.bytes / 1073741824.0, l.mem.source, ranks * c.threads);
  return 0;
}

int mt_plan_report(const mt_config *cfg, int ranks, const char *json_path, FILE *out,
                   mt_err *e) {
  mt_plan p;
  MT_TRY(e, mt_plan_build(cfg, ranks, &p, e));
  mt_plan_print(&p, cfg, out);
  if (json_path) {
    FILE *f = fopen(json_path, "w");
    if (!f) {
      mt_err_set(e, "--plan-json: cannot write '%s'", json_path);
    } else {
      mt_plan_write_json(&p, cfg, f);
      fclose(f);
    }
  }
  mt_plan_free(&p);
  return e->failed ? -1 : 0;
}

int mt_plan_print_schedule(const mt_config *cfg, FILE *out, mt_err *e) {
  mt_layout lay; /* on one process: the mesh as configured */
  MT_TRY(e, mt_layout_validate(cfg, 0, &lay, e));
  mt_pp_schedule s;
  mt_pp_sim sim;
  mt_err why = {0}; /* validation already accepted the schedule */
  mt_pp_schedule_build_sliced(&s, lay.sched, cfg->pp, lay.accum, lay.chunks,
                              lay.sched == MT_SCHED_ZBV, cfg->pp_token_slices);
  mt_pp_schedule_validate(&s, 1, 2, 1, 1, &sim, &why);
  if (out) {
    for (int r = 0; r < cfg->pp; r++) mt_pp_schedule_print(&s, r, out);
    fprintf(out, "# simulated bubble (F = 1, B = 2 per stage) %.4f\n", sim.bubble);
  }
  mt_pp_schedule_free(&s);
  mt_layout_free(&lay);
  return 0;
}

cJSON *mt_plan_json_layout(cJSON *parent, const char *key, const mt_config *cfg, int world) {
  cJSON *lay = cJSON_AddObjectToObject(parent, key);
  cJSON_AddNumberToObject(lay, "world", world);
  cJSON_AddNumberToObject(lay, "dp", cfg->dp);
  cJSON_AddNumberToObject(lay, "tp", cfg->tp);
  cJSON_AddNumberToObject(lay, "pp", cfg->pp);
  cJSON_AddNumberToObject(lay, "cp", cfg->cp);
  if (cfg->cp > 1) cJSON_AddStringToObject(lay, "cp_mode", mt_cp_mode_name(cfg->cp_mode));
  cJSON_AddNumberToObject(lay, "zero", cfg->zero);
  cJSON_AddBoolToObject(lay, "sp", cfg->sp);
  if (cfg->layout == MT_LAYOUT_AUTO) { /* chosen by the planner at start: say what it chose */
    cJSON_AddStringToObject(lay, "planned", "parallel.layout=auto");
    cJSON_AddNumberToObject(lay, "micro_batch", cfg->micro_batch);
    cJSON_AddBoolToObject(lay, "recompute", cfg->recompute);
    cJSON_AddStringToObject(lay, "schedule", mt_pp_sched_name(cfg->pp_schedule));
    cJSON_AddNumberToObject(lay, "virtual_stages", cfg->virtual_stages);
    cJSON_AddNumberToObject(lay, "pp_first_layers", cfg->pp_first_layers);
    cJSON_AddNumberToObject(lay, "pp_last_layers", cfg->pp_last_layers);
    cJSON_AddNumberToObject(lay, "pp_token_slices", cfg->pp_token_slices);
  }
  if (cfg->moe_experts > 0) { /* the folded mesh of the MoE blocks */
    cJSON_AddNumberToObject(lay, "ep", cfg->ep);
    cJSON_AddNumberToObject(lay, "etp", cfg->etp);
    cJSON_AddNumberToObject(lay, "edp", cfg->tp * cfg->cp * cfg->dp / (cfg->etp * cfg->ep));
  }
  return lay;
}

cJSON *mt_plan_json_mem(cJSON *parent, const char *key, const double *bytes) {
  cJSON *mem = cJSON_AddObjectToObject(parent, key);
  for (int c = 0; c < MT_MEM_NCAT; c++)
    cJSON_AddNumberToObject(mem, mt_mem_cat_name((mt_mem_cat)c), bytes[c]);
  return mem;
}
