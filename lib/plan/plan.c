/* The plan: from the configuration and the registry alone (no MPI, no
 * allocation), the bytes every rank of a mesh holds by category and sends
 * per training step on each group. The run counts the same things (the
 * allocator per category, comm per group); the tests hold them equal. */
#include "plan/plan.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static double ar(double bytes, int n) { return mt_bytes_allreduce((size_t)bytes, n); }
static double rs(double bytes, int n) { return mt_bytes_reduce_scatter((size_t)bytes, n); }
static double ag(double bytes, int n) { return mt_bytes_allgather((size_t)bytes, n); }

double mt_plan_rank_total(const mt_plan_rank *r) {
  double s = 0.0;
  for (int c = 0; c < MT_MEM_NCAT; c++) s += r->mem[c];
  return s;
}

/* Gradient and gathered-parameter buffers of the dp/ZeRO engine (dp.c's
 * pools: the last bucket's buffer and two shared by the others; ZeRO-3's
 * buffers of the first and last unit and two shared by the others). */
static void zero_pools(const mt_registry *r, double *grad_bufs, double *gather_bufs) {
  int nb = r->n_buckets;
  *grad_bufs = *gather_bufs = 0.0;
  if (r->zero >= 2 && nb > 0) {
    const mt_bucket_plan *last = &r->buckets[nb - 1];
    double most = 0, most_part = 0;
    for (int k = 0; k < nb - 1; k++) {
      double len = (double)(r->buckets[k].end - r->buckets[k].begin);
      int me = r->group_rank[r->buckets[k].group]; /* this rank in the bucket's group */
      if (len > most) most = len;
      if (r->buckets[k].counts[me] > most_part) most_part = r->buckets[k].counts[me];
    }
    int shared = nb - 1 < 2 ? nb - 1 : 2;
    *grad_bufs = 4.0 * ((double)(last->end - last->begin) + last->counts[r->group_rank[last->group]] +
                        shared * (most + most_part));
  }
  if (r->zero == 3) {
    int U = r->n_units;
    double first = (double)(r->units[0].end - r->units[0].begin);
    double lastu = U > 1 ? (double)(r->units[U - 1].end - r->units[U - 1].begin) : 0.0;
    double most = 0;
    for (int u = 1; u < U - 1; u++)
      if ((double)(r->units[u].end - r->units[u].begin) > most)
        most = (double)(r->units[u].end - r->units[u].begin);
    int shared = U - 2 < 2 ? (U - 2 > 0 ? U - 2 : 0) : 2;
    *gather_bufs = 4.0 * (first + lastu + shared * most);
  }
}

/* Bytes one rank sends per step for gradients and parameters over a
 * reduction group (dp: dense tensors, edp: experts). */
static double dp_state_bytes(const mt_registry *r, int accum, mt_grad_group group) {
  int n = r->group_size[group];
  double b = 0.0;
  for (int k = 0; k < r->n_buckets; k++) {
    if (r->buckets[k].group != group) continue;
    double s = 4.0 * (double)(r->buckets[k].end - r->buckets[k].begin);
    switch (r->zero) {
    case 0: b += ar(s, n); break;
    case 1: b += rs(s, n) + ag(s, n); break;
    case 2: b += accum * rs(s, n) + ag(s, n); break;
    default: { /* a unit per bucket: gathered for forward and again for backward, except the
                  first and last (held from their forward to their backward) */
      int u = r->buckets[k].u0, pinned = u == 0 || u == r->n_units - 1;
      b += accum * (rs(s, n) + (pinned ? 1 : 2) * ag(s, n));
    }
    }
  }
  return b;
}

int mt_plan_model(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                  int cp_rank, int tp_rank, mt_group groups[4], mt_gpt *m, mt_err *e) {
  /* the groups' sizes and ranks only: no MPI */
  memset(groups, 0, 4 * sizeof *groups);
  mt_group *tp_g = &groups[0], *cp_g = &groups[1], *ep_g = &groups[2], *etp_g = &groups[3];
  tp_g->size = cfg->tp;
  tp_g->rank = tp_rank;
  cp_g->size = cfg->cp;
  cp_g->rank = cp_rank;
  /* the folded mesh of MoE blocks over this stage's tp x cp x dp ranks */
  const int moe = lay->shape.moe_experts > 0;
  const int etp = moe ? cfg->etp : 1, ep = moe ? cfg->ep : 1;
  int edp_rank;
  ep_g->size = ep;
  etp_g->size = etp;
  mt_mesh_fold_coords(tp_rank + cfg->tp * (cp_rank + cfg->cp * dp_rank), etp, ep, &etp_g->rank,
                      &ep_g->rank, &edp_rank);
  mt_gpt_parallel par = {tp_g, cfg->sp, cfg->recompute,
                         cfg->pp > 1 && lay->sched == MT_SCHED_ZBH1, NULL, 0, 0, 1,
                         cp_g, mt_cp_mode_parse(cfg->cp_mode), ep_g, etp_g};
  if (cfg->pp > 1) {
    par.stage_of_layer = lay->stage_of_layer;
    par.pp_rank = pp_rank;
    par.pp_last = cfg->pp - 1;
  }
  return mt_gpt_create_plan(m, &lay->shape, mt_ops_cpu(), cfg->micro_batch, &par, e);
}

int mt_plan_rank_build(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_err *e) {
  return mt_plan_rank_model(cfg, lay, pp_rank, dp_rank, cp_rank, tp_rank, out, NULL, e);
}

int mt_plan_rank_model(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_gpt *keep, mt_err *e) {
  memset(out, 0, sizeof *out);
  out->pp_rank = pp_rank;
  out->dp_rank = dp_rank;
  out->cp_rank = cp_rank;
  out->tp_rank = tp_rank;
  out->world_rank = tp_rank + cfg->tp * (cp_rank + cfg->cp * (dp_rank + cfg->dp * pp_rank));
  const mt_model_shape *s = &lay->shape;
  const int pp = cfg->pp, accum = lay->accum, B = cfg->micro_batch;
  const int moe = s->moe_experts > 0;
  const int etp = moe ? cfg->etp : 1, ep = moe ? cfg->ep : 1;
  const int edp = cfg->tp * cfg->cp * cfg->dp / (etp * ep);
  mt_mesh_fold_coords(tp_rank + cfg->tp * (cp_rank + cfg->cp * dp_rank), etp, ep, &out->etp_rank,
                      &out->ep_rank, &out->edp_rank);
  /* the model as this rank would create it, allocating nothing */
  mt_gpt m;
  if (mt_plan_model(cfg, lay, pp_rank, dp_rank, cp_rank, tp_rank, out->groups, &m, e) != 0)
    return -1;
  /* the dp/ZeRO engine's group is dp x cp (rank cp_rank + cp * dp_rank) */
  mt_registry *r = &m.reg;
  mt_registry_set_edp(r, edp, out->edp_rank);
  mt_registry_shard_dp(r, cfg->dp * cfg->cp, cp_rank + cfg->cp * dp_rank, cfg->zero,
                       (size_t)(cfg->bucket_mb * 1048576.0));
  const double n = (double)r->numel_local, shard = (double)r->shard_numel;
  /* the pipeline stage: its layers, activation sets and messages */
  mt_pp_schedule sched;
  mt_pp_schedule_build(&sched, lay->sched, pp, accum, cfg->virtual_stages);
  int n_slots = sched.max_inflight[pp_rank], layers = 0, last_vs = pp * cfg->virtual_stages - 1;
  size_t set_numel = 0;
  /* per micro-batch through this rank's chunks: tp bytes, expert bytes */
  double tp_mb = 0.0, ex_mb[2] = {0.0, 0.0};
  for (int vs = pp_rank; vs <= last_vs; vs += pp) {
    int a, b;
    mt_layout_stage_layers(cfg, lay, vs, &a, &b);
    layers += b - a;
    size_t k = mt_gpt_acts_numel(&m, b - a, B, vs == last_vs);
    if (k > set_numel) set_numel = k;
    tp_mb += mt_gpt_tp_bytes_layers(&m, B, a, b, vs == 0, vs == last_vs);
    double ex[2];
    mt_gpt_expert_bytes_layers(&m, B, a, b, ex);
    ex_mb[0] += ex[0];
    ex_mb[1] += ex[1];
  }
  const double msg = 4.0 * (double)B * m.T_sp * s->n_embd;
  int sends = 0;
  for (int i = 0; i < sched.n_ops[pp_rank]; i++)
    sends += sched.ops[pp_rank][i].kind == MT_PP_SEND_ACT ||
             sched.ops[pp_rank][i].kind == MT_PP_SEND_GRAD;
  double tied = pp > 1 ? (double)mt_pp_tied_numel(r) : 0.0;

  /* ---- memory by category ---- */
  double grad_bufs, gather_bufs;
  zero_pools(r, &grad_bufs, &gather_bufs);
  out->params_numel = cfg->zero == 3 ? shard : n;
  out->mem[MT_MEM_PARAMS] = 4.0 * out->params_numel;
  out->mem[MT_MEM_GRADS] = cfg->zero <= 1 ? 4.0 * (n + (cfg->zero ? shard : 0.0))
                                          : 4.0 * shard + grad_bufs;
  out->mem[MT_MEM_OPTIM] = 2.0 * 4.0 * shard;
  out->mem[MT_MEM_GATHER] = gather_bufs;
  out->mem[MT_MEM_ACTIV] = (double)m.act_bytes + (double)n_slots * 4.0 * (double)set_numel;
  out->mem[MT_MEM_COMM] = (double)m.comm_bytes +
                          (double)mt_pp_exec_comm_bytes(pp, n_slots, (size_t)(msg / 4.0)) +
                          4.0 * tied;
  out->comm_exact = pp == 1;
  /* NCCL's buffers: the communicators a run on GPUs makes, one GPU per rank
   * (comm's estimate; a train.device = cuda run reserves the same) */
  if (!strcmp(cfg->device, "cuda")) {
    unsigned nccl_groups, nccl_p2p;
    mt_comm_nccl_needs(cfg, &nccl_groups, &nccl_p2p);
    mt_mesh_dims dims = {.tp = cfg->tp, .cp = cfg->cp, .dp = cfg->dp, .pp = pp, .etp = etp,
                         .ep = ep};
    out->mem[MT_MEM_COMM] += mt_comm_nccl_bytes(&dims, out->world_rank, nccl_groups, nccl_p2p);
  }

  /* ---- bytes per step and group ---- */
  const int dp = cfg->dp * cfg->cp, tp = cfg->tp; /* dp: the dp x cp group */
  const int tp_norm = tp > 1, pp_norm = pp > 1;
  /* the norm: 2 sums (dense) over dp x cp under ZeRO, 2 more (experts) over
   * edp; MoE models always take the path that sums by placement */
  double dp_state = dp_state_bytes(r, accum, MT_GROUP_DP);
  out->dp_bytes =
      dp_state + ar(8, dp) + (cfg->zero ? ar(tp_norm || pp_norm || moe ? 16 : 8, dp) : 0.0);
  /* context parallelism's attention in every layer of every micro-batch */
  out->cp_bytes = accum * mt_gpt_cp_bytes_range(&m, B, layers);
  double partial = 4.0 * (double)mt_tp_partial_numel(r, 0, r->numel_local);
  out->tp_bytes = accum * tp_mb +
                  (partial > 0 ? (cfg->zero >= 2 ? accum : 1) * ar(partial, tp) : 0.0) +
                  (tp_norm ? ar(8, tp) : 0.0);
  out->pp_bytes = pp > 1 ? sends * msg + 4.0 * tied + ar(8, pp) + ar(moe ? 32 : 16, pp) : 0.0;
  if (moe) {
    out->ep_bytes = accum * ex_mb[0] + ar(16, ep);
    out->etp_bytes = accum * ex_mb[1] + ar(8, etp);
    out->edp_bytes = dp_state_bytes(r, accum, MT_GROUP_EDP) + (cfg->zero ? ar(16, edp) : 0.0);
  }
  mt_pp_schedule_free(&sched);
  /* the dp traffic of gradients and parameters alone, as summary.json states it */
  out->dp_state_bytes = dp_state;
  out->n_buckets = r->n_buckets;
  out->layers = layers;
  if (keep) *keep = m;
  else mt_gpt_destroy(&m);
  return 0;
}

int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e) {
  memset(p, 0, sizeof *p);
  if (mt_layout_validate(cfg, world_size, &p->lay, e) != 0) return -1;
  p->n = p->lay.world;
  p->r = mt_calloc((size_t)p->n, sizeof *p->r);
  for (int pr = 0; pr < cfg->pp; pr++)
    for (int dr = 0; dr < cfg->dp; dr++)
      for (int cr = 0; cr < cfg->cp; cr++)
        for (int tr = 0; tr < cfg->tp; tr++) {
          int w = tr + cfg->tp * (cr + cfg->cp * (dr + cfg->dp * pr));
          if (mt_plan_rank_build(cfg, &p->lay, pr, dr, cr, tr, &p->r[w], e) != 0) return -1;
          p->r[w].world_rank = w;
        }
  return 0;
}

void mt_plan_free(mt_plan *p) {
  free(p->r);
  mt_layout_free(&p->lay);
  memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ */
/* output                                                              */

static const mt_mem_cat g_cols[] = {MT_MEM_PARAMS, MT_MEM_GRADS, MT_MEM_OPTIM, MT_MEM_GATHER,
                                    MT_MEM_ACTIV, MT_MEM_COMM};

void mt_plan_print(const mt_plan *p, const mt_config *cfg, FILE *f) {
  const mt_model_shape *s = &p->lay.shape;
  const double MiB = 1048576.0, MB = 1e6;
  fprintf(f, "# meshtrain plan: %s (%zu parameters, L=%d C=%d T=%d V=%d), mesh pp=%d dp=%d cp=%d "
             "tp=%d (%d ranks), zero=%d%s, micro-batch %d x %d accumulation steps\n",
          cfg->model_preset, mt_model_num_params(s), s->n_layer, s->n_embd, s->seq_len, s->vocab,
          cfg->pp, cfg->dp, cfg->cp, cfg->tp, p->n, cfg->zero, cfg->sp ? ", sp" : "",
          cfg->micro_batch, p->lay.accum);
  const int moe = s->moe_experts > 0;
  if (moe)
    fprintf(f, "# MoE: %d experts (top-%d, hidden %d, %d shared, %s) in %d of %d blocks, %zu "
               "parameters active per token; folded mesh etp=%d ep=%d edp=%d\n",
            s->moe_experts, s->moe_topk, s->moe_ffn, s->moe_shared,
            s->moe_capacity > 0 ? "capacity" : "dropless", mt_model_moe_before(s, s->n_layer),
            s->n_layer, mt_model_active_params(s), cfg->etp, cfg->ep,
            cfg->tp * cfg->cp * cfg->dp / (cfg->etp * cfg->ep));
  fprintf(f, "# per rank, the largest of each stage: memory in MiB by category (fp32), bytes "
             "sent per training step in MB%s\n",
          moe ? " (ep: as a balanced routing implies)" : "");
  fprintf(f, "%-5s %10s %10s %10s %10s %10s %10s %10s | %10s %10s %10s %10s", "stage", "params",
          "grads", "optimizer", "gathered", "activ", "comm", "total", "dp", "tp", "pp", "cp");
  if (moe) fprintf(f, " %10s %10s %10s", "ep", "etp", "edp");
  fputc('\n', f);
  for (int st = 0; st < cfg->pp; st++) {
    mt_plan_rank mx;
    memset(&mx, 0, sizeof mx);
    double total = 0.0;
    int exact = 1;
    for (int i = 0; i < p->n; i++) {
      const mt_plan_rank *r = &p->r[i];
      if (r->pp_rank != st) continue;
      for (int c = 0; c < MT_MEM_NCAT; c++)
        if (r->mem[c] > mx.mem[c]) mx.mem[c] = r->mem[c];
      if (mt_plan_rank_total(r) > total) total = mt_plan_rank_total(r);
      if (r->dp_bytes > mx.dp_bytes) mx.dp_bytes = r->dp_bytes;
      if (r->tp_bytes > mx.tp_bytes) mx.tp_bytes = r->tp_bytes;
      if (r->pp_bytes > mx.pp_bytes) mx.pp_bytes = r->pp_bytes;
      if (r->cp_bytes > mx.cp_bytes) mx.cp_bytes = r->cp_bytes;
      if (r->ep_bytes > mx.ep_bytes) mx.ep_bytes = r->ep_bytes;
      if (r->etp_bytes > mx.etp_bytes) mx.etp_bytes = r->etp_bytes;
      if (r->edp_bytes > mx.edp_bytes) mx.edp_bytes = r->edp_bytes;
      exact &= r->comm_exact;
    }
    fprintf(f, "%-5d", st);
    for (size_t c = 0; c < sizeof g_cols / sizeof g_cols[0]; c++)
      fprintf(f, " %10.2f", mx.mem[g_cols[c]] / MiB);
    fprintf(f, " %9.2f%s | %10.2f %10.2f %10.2f %10.2f", total / MiB, exact ? " " : "+",
            mx.dp_bytes / MB, mx.tp_bytes / MB, mx.pp_bytes / MB, mx.cp_bytes / MB);
    if (moe) fprintf(f, " %10.2f %10.2f %10.2f", mx.ep_bytes / MB, mx.etp_bytes / MB,
                     mx.edp_bytes / MB);
    fputc('\n', f);
  }
  if (cfg->pp > 1)
    fprintf(f, "# +: plus the pipeline's send buffers, one message each while in flight\n");
  if (cfg->cp > 1)
    fprintf(f, "# dp: the dp x cp group (gradients, ZeRO shards); cp: %s attention\n",
            cfg->cp_mode);
}

void mt_plan_write_json(const mt_plan *p, const mt_config *cfg, FILE *f) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", cfg->model_preset);
  cJSON_AddNumberToObject(o, "params", (double)mt_model_num_params(&p->lay.shape));
  if (p->lay.shape.moe_experts > 0)
    cJSON_AddNumberToObject(o, "active_params", (double)mt_model_active_params(&p->lay.shape));
  cJSON *lay = mt_plan_json_layout(o, "layout", cfg, p->n);
  cJSON_AddNumberToObject(lay, "accum", p->lay.accum);
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int i = 0; i < p->n; i++) {
    const mt_plan_rank *r = &p->r[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "rank", r->world_rank);
    cJSON_AddNumberToObject(x, "pp", r->pp_rank);
    cJSON_AddNumberToObject(x, "dp", r->dp_rank);
    cJSON_AddNumberToObject(x, "cp", r->cp_rank);
    cJSON_AddNumberToObject(x, "tp", r->tp_rank);
    cJSON_AddNumberToObject(x, "ep", r->ep_rank);
    cJSON_AddNumberToObject(x, "etp", r->etp_rank);
    cJSON_AddNumberToObject(x, "edp", r->edp_rank);
    mt_plan_json_mem(x, "mem_bytes", r->mem);
    cJSON_AddBoolToObject(x, "comm_exact", r->comm_exact);
    cJSON *b = cJSON_AddObjectToObject(x, "step_bytes");
    cJSON_AddNumberToObject(b, "dp", r->dp_bytes);
    cJSON_AddNumberToObject(b, "tp", r->tp_bytes);
    cJSON_AddNumberToObject(b, "pp", r->pp_bytes);
    cJSON_AddNumberToObject(b, "cp", r->cp_bytes);
    cJSON_AddNumberToObject(b, "ep", r->ep_bytes);
    cJSON_AddNumberToObject(b, "etp", r->etp_bytes);
    cJSON_AddNumberToObject(b, "edp", r->edp_bytes);
    cJSON_AddNumberToObject(x, "dp_state_bytes", r->dp_state_bytes);
    cJSON_AddNumberToObject(x, "params_numel", r->params_numel);
    cJSON_AddItemToArray(ranks, x);
  }
  char *s = cJSON_Print(o);
  fprintf(f, "%s\n", s);
  free(s);
  cJSON_Delete(o);
}
