/* FLOP model, hardware profiles, step records. */
#include "metrics/metrics.h"

#include <cjson/cJSON.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double mt_train_flops_per_token_mm(double n_mm, int n_layer, int n_embd, int seq_len) {
  return 6.0 * n_mm + 6.0 * (double)n_layer * seq_len * n_embd;
}

typedef struct {
  mt_hw_profile *hw;
  unsigned seen; /* the [hw] keys read, by their index in g_hw_keys */
  char bad[160];
} hw_parse;

static const char *g_hw_keys[] = {"name", "description", "peak_gflops_fp32", "peak_gflops_bf16",
                                  "ranks_per_node"};

static int hw_handler(void *user, const char *section, const char *name, const char *value) {
  hw_parse *p = user;
  if (strcmp(section, "cost") == 0) return 1; /* the cost model's (lib/train) */
  if (strcmp(section, "hw") != 0) {
    snprintf(p->bad, sizeof p->bad, "unknown section [%s]", section);
    return 0;
  }
  for (unsigned i = 0; i < sizeof g_hw_keys / sizeof g_hw_keys[0]; i++)
    if (strcmp(name, g_hw_keys[i]) == 0) {
      if (p->seen & (1u << i)) { /* (the last would win unseen) */
        snprintf(p->bad, sizeof p->bad, "[hw] key '%s' given twice (give each key once)", name);
        return 0;
      }
      p->seen |= 1u << i;
    }
  char *end = NULL;
  if (strcmp(name, "name") == 0) {
    snprintf(p->hw->name, sizeof p->hw->name, "%s", value);
  } else if (strcmp(name, "description") == 0) {
    snprintf(p->hw->description, sizeof p->hw->description, "%s", value);
  } else if (strcmp(name, "peak_gflops_fp32") == 0 || strcmp(name, "peak_gflops_bf16") == 0) {
    double x = strtod(value, &end);
    if (end == value || *end != '\0' || !(x >= 0.0) || isinf(x)) {
      snprintf(p->bad, sizeof p->bad, "%s: '%s' is not a number >= 0", name, value);
      return 0;
    }
    if (name[strlen(name) - 1] == '2') p->hw->peak_gflops_fp32 = x;
    else p->hw->peak_gflops_bf16 = x;
  } else if (strcmp(name, "ranks_per_node") == 0) {
    long x = strtol(value, &end, 10);
    if (end == value || *end != '\0' || x < 1 || x > 4096) {
      snprintf(p->bad, sizeof p->bad, "ranks_per_node: '%s' is not an integer in 1..4096", value);
      return 0;
    }
    p->hw->ranks_per_node = (int)x;
  } else {
    snprintf(p->bad, sizeof p->bad, "unknown key '%s'", name);
    return 0;
  }
  return 1;
}

/* A profile name is looked up in inputs/hw/ under the working directory, then
 * beside the executable (build/bin/../../inputs/hw, bin/../share/meshtrain/hw)
 * and in the source tree the program was built from; a path is taken as is. */
FILE *mt_hw_profile_open(const char *name_or_path, char *path, size_t len) {
  if (strchr(name_or_path, '/') || strstr(name_or_path, ".ini")) {
    snprintf(path, len, "%s", name_or_path);
    return fopen(path, "r");
  }
  char exe[1024] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
  }
  const char *fmts[] = {"inputs/hw/%s.ini", "%s/../../inputs/hw/%s.ini",
                        "%s/../share/meshtrain/hw/%s.ini", MT_SOURCE_DIR "/inputs/hw/%s.ini"};
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    if (i == 1 || i == 2) {
      if (!exe[0]) continue;
      snprintf(path, len, fmts[i], exe, name_or_path);
    } else {
      snprintf(path, len, fmts[i], name_or_path);
    }
    FILE *f = fopen(path, "r");
    if (f) return f;
  }
  snprintf(path, len, "inputs/hw/%s.ini", name_or_path);
  return NULL;
}

int mt_hw_profile_load(mt_hw_profile *hw, const char *name_or_path, mt_err *e) {
  memset(hw, 0, sizeof *hw);
  hw->ranks_per_node = 1;
  char path[MT_CFG_STR_MAX + 1200];
  FILE *f = mt_hw_profile_open(name_or_path, path, sizeof path);
  if (!f) {
    mt_err_set(e, "metrics.hw: cannot open hardware profile '%s' (looked for %s and beside "
               "the executable)", name_or_path, path);
    return -1;
  }
  hw_parse p = {hw, 0, ""};
  int rc = ini_parse_file(f, hw_handler, &p);
  fclose(f);
  if (rc != 0) {
    mt_err_set(e, "%s:%d: %s", path, rc, p.bad[0] ? p.bad : "syntax error");
    return -1;
  }
  if (!hw->name[0]) snprintf(hw->name, sizeof hw->name, "%s", name_or_path);
  return 0;
}

char *mt_step_record_json(const mt_step_record *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "step", r->step);
  cJSON_AddNumberToObject(o, "loss", r->loss);
  if (r->val_loss >= 0) cJSON_AddNumberToObject(o, "val_loss", r->val_loss);
  if (r->val_loss >= 0 && r->val_sources > 1 && r->val_names && r->val_by_source) {
    cJSON *v = cJSON_AddObjectToObject(o, "val_loss_by_source");
    for (int i = 0; i < r->val_sources; i++)
      cJSON_AddNumberToObject(v, r->val_names[i], r->val_by_source[i]);
  }
  if (r->has_data_hash) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->data_hash);
    cJSON_AddStringToObject(o, "data_hash", hex);
  }
  if (r->flop_imbalance > 0) cJSON_AddNumberToObject(o, "flop_imbalance", r->flop_imbalance);
  if (r->varlen) {
    cJSON_AddNumberToObject(o, "pad_share", r->pad_share);
    cJSON_AddNumberToObject(o, "varlen_rows", r->varlen_rows);
    cJSON_AddNumberToObject(o, "varlen_exchange_mb", r->varlen_exchange_mb);
    if (r->varlen_fallback) cJSON_AddTrueToObject(o, "varlen_fallback");
    if (r->varlen_hash) {
      char h[20];
      snprintf(h, sizeof h, "%016llx", (unsigned long long)r->varlen_hash);
      cJSON_AddStringToObject(o, "varlen_hash", h);
    }
  }
  if (r->rollback_from > 0) {
    cJSON_AddNumberToObject(o, "rollback_from", (double)r->rollback_from);
    cJSON_AddNumberToObject(o, "rollback_skipped", (double)r->rollback_skipped);
  }
  cJSON_AddNumberToObject(o, "lr", r->lr);
  cJSON_AddNumberToObject(o, "grad_norm", r->grad_norm);
  cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
  cJSON_AddNumberToObject(o, "tokens_per_s", r->step_s > 0 ? r->tokens / r->step_s : 0.0);
  cJSON_AddNumberToObject(o, "step_s", r->step_s);
  cJSON *t = cJSON_AddObjectToObject(o, "time_s");
  cJSON_AddNumberToObject(t, "compute", r->compute_s);
  cJSON_AddNumberToObject(t, "dp_comm", r->dp_comm_s);
  cJSON_AddNumberToObject(t, "optimizer", r->optim_s);
  cJSON_AddNumberToObject(t, "data", r->data_s);
  cJSON_AddNumberToObject(t, "eval", r->eval_s);
  cJSON_AddNumberToObject(t, "ckpt", r->ckpt_s);
  cJSON_AddNumberToObject(t, "ckpt_write", r->ckpt_write_s);
  cJSON_AddNumberToObject(t, "tp_comm", r->tp_comm_s);
  cJSON_AddNumberToObject(t, "cp_comm", r->cp_comm_s);
  cJSON_AddNumberToObject(o, "dp_bytes", r->dp_bytes);
  cJSON_AddNumberToObject(o, "tp_bytes", r->tp_bytes);
  cJSON_AddNumberToObject(o, "cp_bytes", r->cp_bytes);
  if (r->pp > 1 && r->pp_stage) {
    cJSON *p = cJSON_AddObjectToObject(o, "pp");
    const char *names[MT_PP_STAT_N] = {"wait_s", "bubble", "act_peak_bytes", "dp_exposed_s",
                                       "dp_overlapped"};
    for (int k = 0; k < MT_PP_STAT_N; k++) {
      cJSON *arr = cJSON_AddArrayToObject(p, names[k]);
      for (int st = 0; st < r->pp; st++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->pp_stage[MT_PP_STAT_N * st + k]));
    }
    cJSON_AddNumberToObject(p, "comm_s", r->pp_comm_s);
    cJSON_AddNumberToObject(o, "pp_bytes", r->pp_bytes);
  }
  if (r->moe_blocks > 0) {
    /* per MoE block: the busiest expert's slots over the mean (1 = balanced),
     * the fraction of slots dropped, and the slots of every expert */
    cJSON *moe = cJSON_AddObjectToObject(o, "moe");
    cJSON_AddNumberToObject(moe, "aux_loss", r->moe_aux_loss);
    cJSON_AddNumberToObject(moe, "z_loss", r->moe_z_loss);
    cJSON *aux = cJSON_AddArrayToObject(moe, "aux_loss_per_block");
    for (int b = 0; b < r->moe_blocks; b++)
      cJSON_AddItemToArray(aux, cJSON_CreateNumber(r->moe_aux_block ? r->moe_aux_block[b] : 0.0));
    cJSON *load = cJSON_AddArrayToObject(moe, "load_max_over_mean");
    cJSON *drop = cJSON_AddArrayToObject(moe, "dropped_frac");
    cJSON *tok = cJSON_AddArrayToObject(moe, "tokens_per_expert");
    for (int b = 0; b < r->moe_blocks; b++) {
      const double *x = r->moe_tokens + (size_t)b * r->moe_experts;
      double sum = 0.0, most = 0.0;
      cJSON *row = cJSON_CreateArray();
      for (int e = 0; e < r->moe_experts; e++) {
        sum += x[e];
        if (x[e] > most) most = x[e];
        cJSON_AddItemToArray(row, cJSON_CreateNumber(x[e]));
      }
      cJSON_AddItemToArray(tok, row);
      cJSON_AddItemToArray(load, cJSON_CreateNumber(sum > 0 ? most * r->moe_experts / sum : 0.0));
      cJSON_AddItemToArray(drop, cJSON_CreateNumber(sum > 0 ? r->moe_dropped[b] / sum : 0.0));
    }
    if (r->moe_rows_sum) { /* the busiest rank's expert rows over the stage's mean */
      cJSON *bus = cJSON_AddArrayToObject(moe, "rows_max_over_mean");
      cJSON *mv = cJSON_AddArrayToObject(moe, "moved_frac");
      for (int b = 0; b < r->moe_blocks; b++) {
        double mean = r->moe_rows_sum[b] / (r->moe_stage_ranks > 0 ? r->moe_stage_ranks : 1);
        cJSON_AddItemToArray(bus, cJSON_CreateNumber(mean > 0 ? r->moe_rows_max[b] / mean : 0.0));
        cJSON_AddItemToArray(mv, cJSON_CreateNumber(
            r->moe_rows_sum[b] > 0 ? r->moe_moved[b] / r->moe_rows_sum[b] : 0.0));
      }
    }
    cJSON_AddNumberToObject(moe, "ep_bytes", r->ep_bytes);
    cJSON_AddNumberToObject(moe, "ep_comm_s", r->ep_comm_s);
    cJSON_AddNumberToObject(moe, "etp_bytes", r->etp_bytes);
    cJSON_AddNumberToObject(moe, "etp_comm_s", r->etp_comm_s);
    cJSON_AddNumberToObject(moe, "edp_bytes", r->edp_bytes);
    cJSON_AddNumberToObject(moe, "edp_comm_s", r->edp_comm_s);
  }
  cJSON_AddNumberToObject(o, "model_flops", r->model_flops);
  cJSON_AddNumberToObject(o, "flops_per_s", r->flops_per_s);
  cJSON_AddNumberToObject(o, "mfu", r->peak_flops > 0 ? r->flops_per_s / r->peak_flops : 0.0);
  if (r->optimizer_flops > 0) { /* the model's and the optimizer's, as Megatron-LM reports */
    cJSON_AddNumberToObject(o, "optimizer_flops", r->optimizer_flops);
    cJSON_AddNumberToObject(o, "mfu_model_plus_optimizer",
                            r->peak_flops > 0 && r->step_s > 0
                                ? (r->model_flops + r->optimizer_flops) / r->step_s / r->peak_flops
                                : 0.0);
  }
  cJSON *m = cJSON_AddObjectToObject(o, "mem_peak_bytes");
  for (int c = 0; c < MT_MEM_NCAT; c++)
    cJSON_AddNumberToObject(m, mt_mem_cat_name((mt_mem_cat)c), (double)r->mem_peak[c]);
  cJSON_AddNumberToObject(m, "rss", (double)r->rss_peak);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

void mt_step_record_progress(const mt_step_record *r, double eta_s, FILE *f) {
  int eta = (int)(eta_s + 0.5);
  fprintf(f, "step %5d/%d | loss %.4f", r->step, r->steps, r->loss);
  if (r->val_loss >= 0) fprintf(f, " | val %.4f", r->val_loss);
  if (r->moe_blocks > 0) { /* the busiest block's expert load (max / mean) and the aux loss */
    double worst = 0.0;
    for (int b = 0; b < r->moe_blocks; b++) {
      const double *x = r->moe_tokens + (size_t)b * r->moe_experts;
      double sum = 0.0, most = 0.0;
      for (int e = 0; e < r->moe_experts; e++) {
        sum += x[e];
        most = x[e] > most ? x[e] : most;
      }
      if (sum > 0 && most * r->moe_experts / sum > worst) worst = most * r->moe_experts / sum;
    }
    fprintf(f, " | moe aux %.4f load %.2f", r->moe_aux_loss, worst);
  }
  /* an MFU above 100% is no utilisation (the peak is wrong): marked, not shown as real */
  const double mfu = r->peak_flops > 0 ? 100.0 * r->flops_per_s / r->peak_flops : 0.0;
  fprintf(f, " | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms | MFU %5.1f%%%s", r->lr,
          r->grad_norm, r->step_s > 0 ? r->tokens / r->step_s : 0.0, 1e3 * r->step_s, mfu,
          mfu > 100.0 ? " (over the peak: not real)" : "");
  if (r->optimizer_flops > 0 && r->peak_flops > 0 && r->step_s > 0) /* Muon: with its FLOPs */
    fprintf(f, " (+optim %.1f%%)", 100.0 * r->optimizer_flops / r->step_s / r->peak_flops);
  fprintf(f, " | ETA %d:%02d:%02d\n", eta / 3600, eta / 60 % 60, eta % 60);
  fflush(f);
}
